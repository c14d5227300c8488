"""Adapters between syncfree environments and other libraries' environment interfaces."""

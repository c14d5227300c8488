"""The leaf layer: switches, compile helpers, phases and counters, memory, device selection, the host transfer.

Nothing here imports another part of syncfree (but `syncfree.errors`)."""

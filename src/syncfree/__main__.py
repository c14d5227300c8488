from syncfree.cli import run

run()

from syncfree.cli import run

if __name__ == "__main__":  # not in a process multiprocessing spawns (a study's workers), which imports this module
    run()

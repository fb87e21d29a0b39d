"""`servescope sweep`: a series of runs over concurrency or rate, the capacity search and the sweep table."""

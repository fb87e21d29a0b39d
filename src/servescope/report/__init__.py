"""Reports: the console summary, SVG charts, report.html for runs, sweeps and repeats, and `compare`."""

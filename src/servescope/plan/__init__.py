"""`servescope plan`: memory fit, what-if on the performance model's virtual clock, calibration, launch recipes."""

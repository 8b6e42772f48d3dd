"""Running a placement search and turning its archive into a front of plans."""

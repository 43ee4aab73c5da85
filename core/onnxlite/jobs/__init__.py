"""The job format: what an executor runs, below both the search and the executors.

A job (:mod:`onnxlite.jobs.candidate`) is one ``lighten`` candidate described by a JSON file (the float
model, the candidate, the calibration file, the judge folder on disk) that writes a JSON result and a
model file.  ``search/`` writes jobs and reads their results; ``executors/`` decide where they run
(warm workers here, subprocesses, Ray tasks).  Neither imports the other for it.
"""

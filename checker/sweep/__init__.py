"""`batchproof sweep`: a grid of configurations x properties, hazards and `worst` metrics,
run through the job function of checker/methods/jobs.py on a process pool or on Ray.

- grid.py       the grid file: parse, expand, skip the configs the engine refuses, key jobs
- work.py       the task both executors run: one config's jobs -> outcomes
- executors.py  the local process pool and the Ray executor, results as they finish
- store.py      rows: the resumable journal, Parquet (pyarrow) and CSV
- pictures.py   heatmaps (matplotlib) and the HTML page
- progress.py   the progress bar (tqdm)
- extras.py     the optional dependencies, each a one-line error naming its extra
"""

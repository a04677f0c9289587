"""What-if problems for `hetsched allocate` (allocate.py): the problem JSON read strictly into the
core's `Problem` (problem.py), the jobs' steps/s from the file or the throughput table
(rates.py), and the checks of single fields (fields.py)."""

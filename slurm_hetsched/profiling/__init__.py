"""`hetsched profile`: measure a job class's steps/s on the cluster's GPU types and write them
as a site throughput table (docs/throughput.md, "Profiling a class").

- `plan`: the checked request, the (GPU type, count) cases the cluster can run, and each
  case's sbatch options and job script (pure, no Slurm);
- `results`: what a finished job measured, read from its state folder with the controller's
  safe readers, and the results as a small table;
- `table_file`: merging the measurements into a throughput file, written atomically and
  checked the way the controller's `site.throughputs` reads it;
- `run`: submitting the jobs, waiting for them (cancelled on timeout or Ctrl-C), and the rest.

It never imports the controller's service or the policies; the Slurm backend is the only way
it talks to Slurm. Nothing is imported here, so that `hetsched`'s parser, which reads `plan`'s
defaults, does not load numpy with the table code.
"""

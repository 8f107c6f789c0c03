"""Executors: where a queue item's work runs (issue 37).

The local runner (`moe_tui.run.controller.Controller`) works items in its own process, one at a time.
An executor hands each item to a batch system instead, as one job that runs the same controller
code on one item inside the job (`job`), and brings the result back as one file (`results`):

- `base`: the small interface (`Executor`: submit, poll, cancel, find by name) and the job words;
- `slurm`: `sbatch`/`squeue`/`scancel` (`SlurmExecutor`), its settings (`SlurmSettings`);
- `job`: what runs inside a job (`python -m moe_tui.executors.job JOB.json`);
- `results`: the per-job result file (written once, atomically) and its idempotent import;
- `nodes`: each job's node GPUs, relayed through its job folder, as the dashboard's node rows;
- `dispatch`: the controller's loop over an executor (`Dispatcher`): submit, watch, import, retry,
  re-adopt after a restart. `docs/executors.md` says how it fits together and how a Kubernetes
  executor would.
"""

"""SLURM array jobs for nemo_gym: `ng_slurm_submit` renders and submits a collect array plus a dependent aggregate job.

The job script templates live in `job_scripts/`; `layout` names every file a run writes.
"""

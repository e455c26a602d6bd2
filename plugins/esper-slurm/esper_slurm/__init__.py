"""esper-slurm: the cells of ``esper compare`` as SLURM jobs through submitit (``--runner slurm``)."""

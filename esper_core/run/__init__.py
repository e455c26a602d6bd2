"""Running an experiment: ``api.run`` (``esper run``) and ``api.train`` (``esper train``).

Read in this order: ``resolve`` (config -> validated components, each built as
``cls(options, context)``), ``run_dir`` (the directory's files and checks), ``session``
(envs, policy, executor, telemetry hub, checkpoint), ``loops`` (``EpisodeLoop`` and
``TrainLoop`` over one session), ``summary`` (summary.json), ``api``. Errors propagate
unchanged; ``failures`` explains them for whoever draws the error boundary (the CLI;
``boundary`` for other callers such as compare cells).
"""

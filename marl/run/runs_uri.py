"""`runs:/<run_id>[/<path>]` URIs wherever a run's folder, checkpoint or resume point is asked for.

Such a URI names a folder of a run: first looked for on this machine, under the `output_dir` the run
logged as a parameter (`<output_dir>/<run_id>/<path>`), else downloaded from the run's artifacts
(what `marl train` logs there: `checkpoint/`, and with `checkpoint.log_to_mlflow` `resume/it-N/`).
It leaves out what the folder holds (the checkpoint and resume modules check that).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from marl.run.checkpoint import CheckpointError

RUNS_SCHEME = "runs:/"


def is_runs_uri(path: str | Path) -> bool:
    return str(path).startswith(RUNS_SCHEME)


def split_runs_uri(uri: str) -> tuple[str, str]:
    """(run id, path inside the run; "" for none)."""
    run_id, _, rest = uri.removeprefix(RUNS_SCHEME).strip("/").partition("/")
    if not run_id:
        raise CheckpointError(f"{uri}: a runs:/ URI names a run: runs:/<run_id>[/<path>]")
    return run_id, rest.strip("/")


def run_folder(uri: str, tracking_uri: str, usable: Callable[[Path], bool],
               artifact: Callable[[str, list[str]], str | None]) -> Path:
    """The local folder `uri` names: `<output_dir>/<run_id>/<path>` where `usable` accepts it, else the artifact
    path `artifact(path, top-level artifact folders)` picks (None: there is none), downloaded."""
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    run_id, rest = split_runs_uri(uri)
    client = MlflowClient(tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        raise CheckpointError(f"{uri}: no run {run_id!r} in {tracking_uri} (pass --tracking-uri of the store that "
                              f"holds it): {err.message}") from None
    local = Path(run.data.params.get("output_dir", "runs")) / run_id / rest
    if local.exists() and usable(local):
        return local
    chosen = artifact(rest, [f.path for f in client.list_artifacts(run_id) if f.is_dir])
    if chosen is None:
        raise CheckpointError(f"{uri}: {local} is not on this machine and the run logged no such artifact")
    try:
        return Path(download_artifacts(run_id=run_id, artifact_path=chosen, tracking_uri=tracking_uri))
    except (MlflowException, OSError) as err:
        raise CheckpointError(f"{uri}: could not download the run's {chosen}: {err}") from None


def checkpoint_folder(path: str | Path, tracking_uri: str) -> Path:
    """A checkpoint folder from a path or `runs:/<run_id>[/checkpoint|/best]` (no path: the final checkpoint)."""
    if not is_runs_uri(path):
        return Path(path)

    def artifact(rest: str, folders: list[str]) -> str | None:
        wanted = rest or "checkpoint"
        return wanted if wanted.split("/")[0] in folders else None
    return run_folder(str(path) if split_runs_uri(str(path))[1] else f"{str(path).rstrip('/')}/checkpoint",
                      tracking_uri, lambda p: (p / "marl_checkpoint.json").is_file(), artifact)

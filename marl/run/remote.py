"""RL rollouts on Ray actors: each holds its own environments and an inference copy of the policies.

`RemoteRollouts` stands where the training loop's `RolloutWorker` stood and collects the same way: the
collection is planned into parts (`RolloutWorker.plan`, each part with its own sampling seed), the parts
go round-robin to the actors, and the records come back as plain batches, joined in part order. So K
workers play exactly the episodes one in-process worker plays with the same parts (`rl.rollout_rows`
fixes them; without it a collection is cut into one part per worker).

Weights go out through Ray's object store at every collection: a policy an actor has not seen (the
learners at the start, an opponent pool's snapshot, a curriculum's newcomer) as a whole pickled policy,
once; a policy that trains as its weights only (for a LoRA adapter, the adapter's). Every call carries
references to all of it, so an actor Ray restarted after its process died (`ray.max_restarts`) rebuilds
its copies from the call it is retried with; each restart is counted (`rollout/worker_restarts`).
It leaves out the learner, which stays in the driving process, and evaluation, which runs there too.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from marl.config import TrainConfig
from marl.engine.errors import EnvCrashError
from marl.engine.policy_map import PolicyMap
from marl.engine.records import RolloutBatch, concat_batches
from marl.engine.rollout import Part, RolloutWorker
from marl.run.build import load_policy_weights, policy_weights
from policies.pickling import capture_hooks_detached

log = logging.getLogger(__name__)


@dataclass
class Shipment:
    """What an actor needs to act as the driver's policy map does now, as references into the object store."""

    policies: dict[str, tuple[int, list[Any]]]
    """Per policy id: the token of the policy object and a one-item list holding the reference to a bundle
    of whole pickled policies that has it (a list, so Ray hands the reference over unresolved)."""
    weights: list[Any]
    """One reference to the current weights of every policy that trains (`policy_weights`), by id."""
    route: Callable[[Any, str], str]
    """The map's routing function (which policy acts for which agent)."""


@dataclass
class Played:
    """An actor's answer: one batch per part it was given, and what it observed while playing them."""

    batches: list[RolloutBatch]
    env_crashes: int
    message_stats: dict[str, float]
    incarnation: str
    """Made anew each time the actor's process starts: a change means Ray restarted it."""


@dataclass
class Pending:
    """A submitted collection: when it started, how many parts, which worker plays which, and their calls."""

    start: float
    parts: int
    given: list[list[int]]
    calls: list[tuple[int, Any]]


def trains(policy: Any) -> bool:
    """Whether any weight of `policy` (its model, its opponent head) can change: then it ships every collection."""
    modules = [policy.model, getattr(policy, "opponent_head", None)]
    return any(p.requires_grad for m in modules if m is not None for p in m.parameters())


class RolloutActor:
    """The body of one Ray rollout worker: environments, policy copies, and `play` for planned parts."""

    def __init__(self, factories: Mapping[str, Callable[[], Any]], chat: Any, max_rows: int, turn_cache: bool,
                 threads: int, device: str) -> None:
        torch.set_num_threads(threads)
        variants = {name: make for name, make in factories.items() if name}
        self.worker = RolloutWorker(factories[""], None, chat, turn_cache=turn_cache, max_rows=max_rows,
                                    variants=variants)
        self.device = device
        self.held: dict[str, tuple[int, Any]] = {}
        self.incarnation = uuid.uuid4().hex

    def _sync(self, shipment: Shipment) -> None:
        import ray

        bundles: dict[Any, dict[str, Any]] = {}
        held: dict[str, tuple[int, Any]] = {}
        for pid, (token, (ref,)) in shipment.policies.items():
            if pid in self.held and self.held[pid][0] == token:
                held[pid] = self.held[pid]
                continue
            if ref not in bundles:
                bundles[ref] = ray.get(ref)
            policy = bundles[ref][pid]
            if self.device != "cpu":
                policy.model.to(self.device)
                if policy.opponent_head is not None:
                    policy.opponent_head.to(self.device)
            held[pid] = (token, policy)
        self.held = held
        for pid, saved in ray.get(shipment.weights[0]).items():
            load_policy_weights(held[pid][1], saved)
        self.worker.policies = PolicyMap({pid: policy for pid, (_, policy) in held.items()}, shipment.route)

    def play(self, shipment: Shipment, parts: Sequence[Part], options: dict[str, Any],
             crash_allowance: int | None) -> Played:
        """Play `parts` with the shipped policies; at most `crash_allowance` environment crashes (None: any)."""
        self._sync(shipment)
        self.worker.env_crashes, self.worker.max_env_crashes = 0, crash_allowance
        batches = [self.worker.play(part, **options) for part in parts]
        return Played(batches, self.worker.env_crashes, self.worker.message_stats(), self.incarnation)

    def incarnation_id(self) -> str:
        """Made anew each time the actor's process starts."""
        return self.incarnation

    def pid(self) -> int:
        """The actor's process id (what a test kills)."""
        return os.getpid()


class RemoteRollouts:
    """`RolloutWorker.collect` on `workers` Ray actors; everything else is the local worker's."""

    def __init__(self, local: RolloutWorker, workers: int, address: str | None = None, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, max_restarts: int = 3) -> None:
        try:
            import ray
        except ImportError as err:
            raise ImportError("rollout_workers > 0 runs rollouts on Ray: pip install 'marl[ray]' (or set "
                              "rollout_workers 0)") from err
        if workers < 1:
            raise ValueError(f"workers={workers}: a remote rollout needs at least one worker")
        self.local = local
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            address = address or os.environ.get("RAY_ADDRESS")
            local_cpus = None if address else max(os.cpu_count() or 1, int(workers * cpus_per_worker + 0.999))
            ray.init(address=address, num_cpus=local_cpus, include_dashboard=False, log_to_driver=True,
                     configure_logging=False)
        need = workers * cpus_per_worker
        have = ray.cluster_resources().get("CPU", 0.0)
        if have < need:
            self.close()
            raise RuntimeError(f"{workers} rollout workers x {cpus_per_worker} CPUs need {need:g} CPUs; the Ray "
                               f"cluster has {have:g}: lower rollout_workers or ray.cpus_per_worker")
        remote = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=max_restarts,
                            max_task_retries=max_restarts)(RolloutActor)
        device = "cuda" if gpus_per_worker > 0 else "cpu"
        threads = max(1, int(cpus_per_worker))
        self.actors = [remote.remote(local.factories, local.chat, local.max_rows, local.turn_cache, threads, device)
                       for _ in range(workers)]
        self.restarts = 0
        """Times Ray restarted a worker whose process died (counted when the worker next answers)."""
        # Waiting for each worker's first incarnation also keeps the workers' start out of the first collection.
        self._incarnations: list[str] = ray.get([a.incarnation_id.remote() for a in self.actors])
        self._messages: list[dict[str, float]] = [{} for _ in range(workers)]
        self._shipped: dict[str, tuple[Any, int, Any]] = {}  # pid -> (policy object, token, bundle reference)
        self._tokens = itertools.count()

    def __getattr__(self, name: str) -> Any:  # only for names this class lacks: the local worker's
        if name in ("local", "actors") or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.local, name)

    @property
    def policies(self) -> PolicyMap:
        return self.local.policies

    @policies.setter
    def policies(self, value: PolicyMap) -> None:  # an opponent pool seats its snapshots for a collection
        self.local.policies = value

    @property
    def env_crashes(self) -> int:
        return self.local.env_crashes

    @env_crashes.setter
    def env_crashes(self, value: int) -> None:
        self.local.env_crashes = value

    def message_stats(self) -> dict[str, float]:
        """Message counts summed over every worker's environments and the local ones."""
        totals = dict(self.local.message_stats())
        for stats in self._messages:
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v
        return totals

    def _ship(self) -> Shipment:
        import ray

        current = self.policies.policies
        new = {pid: p for pid, p in current.items() if pid not in self._shipped or self._shipped[pid][0] is not p}
        if new:
            with capture_hooks_detached(new.values()):
                bundle = ray.put(new)
            for pid, policy in new.items():
                self._shipped[pid] = (policy, next(self._tokens), bundle)
        for pid in [pid for pid in self._shipped if pid not in current]:
            del self._shipped[pid]  # an evicted snapshot: its bundle goes once no shipment refers to it
        weights = {pid: policy_weights(p) for pid, p in current.items() if trains(p)}
        return Shipment({pid: (token, [bundle]) for pid, (_, token, bundle) in self._shipped.items()},
                        [ray.put(weights)], self.policies.route)

    def collect(self, seeds: Sequence[int], groups: Sequence[int] | None = None, greedy: bool = False,
                sample_seed: int | None = None, actor: Callable[[Any, str], str] | None = None, max_loops: int = 1000,
                record_state: bool = False, scripted: Callable[[Any, str], bool] | None = None,
                seats: Sequence[Mapping[str, str]] | None = None, variants: Sequence[str] | None = None,
                explore: float = 0.0) -> RolloutBatch:
        """`RolloutWorker.collect`, its parts played on the workers at once (see the module docstring)."""
        return self.finish(self.submit(seeds, groups, greedy, sample_seed, actor, max_loops, record_state, scripted,
                                       seats, variants, explore))

    def submit(self, seeds: Sequence[int], groups: Sequence[int] | None = None, greedy: bool = False,
               sample_seed: int | None = None, actor: Callable[[Any, str], str] | None = None, max_loops: int = 1000,
               record_state: bool = False, scripted: Callable[[Any, str], bool] | None = None,
               seats: Sequence[Mapping[str, str]] | None = None, variants: Sequence[str] | None = None,
               explore: float = 0.0) -> Pending:
        """Start a collection with the policies as they are now and return at once; `finish` waits for it."""
        start = time.perf_counter()
        parts = self.local.plan(seeds, groups, sample_seed, seats, variants, min_parts=len(self.actors))
        shipment = self._ship()
        options = dict(greedy=greedy, actor=actor, max_loops=max_loops, record_state=record_state, scripted=scripted,
                       explore=explore)
        limit = self.local.max_env_crashes
        allowance = None if limit is None else max(limit - self.env_crashes, 0)
        given = [list(range(k, len(parts), len(self.actors))) for k in range(len(self.actors))]
        calls = [(k, actor_.play.remote(shipment, [parts[i] for i in given[k]], options, allowance))
                 for k, actor_ in enumerate(self.actors) if given[k]]
        return Pending(start, len(parts), given, calls)

    def finish(self, pending: Pending) -> RolloutBatch:
        """The batch of a submitted collection, once every worker has played its parts."""
        import ray

        try:
            answers = {k: ray.get(ref) for k, ref in pending.calls}
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"a rollout worker died more often than ray.max_restarts allows: {err}") from err
        ordered: list[RolloutBatch | None] = [None] * pending.parts
        for k, played in answers.items():
            if self._incarnations[k] != played.incarnation:
                self.restarts += 1
                log.warning("rollout worker %d was restarted (%d restart(s) so far)", k, self.restarts)
            self._incarnations[k] = played.incarnation
            self._messages[k] = played.message_stats
            self.env_crashes += played.env_crashes
            for i, batch in zip(pending.given[k], played.batches, strict=True):
                ordered[i] = batch
        limit = self.local.max_env_crashes
        if limit is not None and self.env_crashes > limit:
            raise EnvCrashError(f"{self.env_crashes} environment crashes over the rollout workers, more than the "
                                f"{limit} tolerated (guards.max_env_crashes)")
        batch = concat_batches([b for b in ordered if b is not None])
        # The parts ran side by side: time is the collection's wall clock, generation its share of the parts' time.
        wall = time.perf_counter() - pending.start
        share = wall / max(batch.seconds, 1e-9)
        return replace(batch, seconds=wall, generate_seconds=batch.generate_seconds * share,
                       env_seconds=batch.env_seconds * share)

    def pids(self) -> list[int]:
        """Each worker's process id."""
        import ray

        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        """Stop the workers, and the local Ray cluster where this object started it."""
        import ray

        for a in getattr(self, "actors", []):
            ray.kill(a)
        self.actors = []
        if self.started_ray and ray.is_initialized():
            ray.shutdown()


def remote_rollouts(cfg: TrainConfig, local: RolloutWorker) -> RemoteRollouts:
    """The run's Ray rollout workers (`cfg.rollout_workers` of them, on `cfg.ray`'s cluster)."""
    r = cfg.ray
    return RemoteRollouts(local, cfg.rollout_workers, r.address, r.cpus_per_worker, r.gpus_per_worker, r.max_restarts)

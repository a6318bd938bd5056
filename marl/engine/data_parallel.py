"""The learner's data parallelism over torch.distributed: each process scores a share of every minibatch.

A policy step sums gradients over micro-batches whose token means are divided by the whole minibatch's
counts (`Learner._step`), so splitting the micro-batches over processes and summing the gradients with one
all-reduce gives the minibatch's gradient exactly as one process would (up to the order of the float sums).
Process 0 runs the whole pipeline (rollouts, MLflow, checkpoints) and owns the optimizer; before each policy
step it sends the step's sequences, advantages and KL weight, and the current weights, to the others
(`LearnerGroup.send_step`), which score their share and add their gradients into process 0's. The others run
`LearnerGroup.follow` until process 0 says stop. Launched by `torchrun` (gloo on CPUs, nccl on GPUs).
It leaves out the critic's steps and the demonstrations term (process 0 alone computes them) and loss terms
added with `Learner.add_term` (refused: the others would not have them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from policies.pickling import capture_hooks_detached, root_module

STOP = "stop"


class LearnerGroup:
    """This process's place among the learner's processes (rank 0 leads; world 1: no other process)."""

    def __init__(self, rank: int = 0, world: int = 1, device: str = "cpu", owns_process_group: bool = False) -> None:
        self.rank, self.world, self.device = rank, world, device
        self._known: set[str] = set()  # policy ids whose policy the followers have
        self._owns = owns_process_group  # this group started torch.distributed, so it ends it (`close`)

    @classmethod
    def from_env(cls, device: str = "cpu") -> LearnerGroup:
        """The group torchrun describes in $WORLD_SIZE / $RANK (a group of one without it). With a CUDA
        `device` (or `auto` where CUDA is available) each process takes the GPU of its $LOCAL_RANK and the
        group talks nccl; else gloo."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda:
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
            torch.cuda.set_device(device)
        owns = not dist.is_initialized()
        if owns:
            # Processes 1.. wait in a collective while process 0 plays rollouts, fine-tunes or evaluates, which
            # may take hours; torchrun ends them all if process 0 fails.
            dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(hours=12))
        return cls(dist.get_rank(), dist.get_world_size(), device if cuda else "cpu", owns)

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def share(self, parts: Sequence[Any]) -> list[Any]:
        """This process's micro-batches of a step (every `world`-th, from its rank on)."""
        return list(parts[self.rank :: self.world])

    def _send(self, message: Any) -> Any:
        box = [message]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def send_step(self, pid: str, learner: Any, payload: tuple) -> None:
        """Process 0, before a policy step: the policy (first time), the step's inputs and the weights."""
        if learner.extra_terms:
            raise ValueError("loss terms added with add_term are not sent to the learner's other processes; "
                             "run them in one process (no torchrun)")
        if pid not in self._known:  # its reference too: the one process 0's learner anchors its KL on
            with capture_hooks_detached([learner.policy, learner.reference]):
                self._send(("policy", pid, learner.policy, learner.reference, learner.cfg, learner.aux_coef))
            self._known.add(pid)
        self._send(("step", pid, payload, learner.kl.value, learner.opponent_weight))
        for p in learner._parameters():
            dist.broadcast(p.data, src=0)

    def add_gradients(self, params: Sequence[torch.nn.Parameter], out: dict[str, float], loads: list[torch.Tensor],
                      finite: bool) -> tuple[dict[str, float], list[torch.Tensor], bool]:
        """Every process's gradients summed into each one's `params`; their figures and expert loads summed,
        and whether every share was finite (each process gets the same answer)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0)
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, (out, [load.cpu() for load in loads], finite))
        merged: dict[str, float] = {}
        for figures, _, _ in gathered:
            for k, v in figures.items():
                merged[k] = v if k.startswith("loss_weight/") else merged.get(k, 0.0) + v
        return merged, [load for _, shares, _ in gathered for load in shares], all(ok for _, _, ok in gathered)

    def follow(self, make_learner: Callable[[Any, Any, Any, float], Any]) -> None:
        """Processes 1..: score shares of process 0's steps until it says stop. `make_learner(policy, reference,
        rl_cfg, aux_coef)` builds the learner a newly sent policy steps with (`Learner` itself)."""
        learners: dict[str, Any] = {}
        while True:
            message = self._send(None)
            if message == STOP:
                return
            if message[0] == "policy":
                _, pid, policy, reference, cfg, aux_coef = message
                for model in (policy.model, reference.model, policy.opponent_head):  # onto this process's GPU
                    if model is not None:
                        root_module(model).to(self.device)
                learners[pid] = make_learner(policy, reference, cfg, aux_coef)
                learners[pid].group = self
                continue
            _, pid, payload, kl_value, opponent_weight = message
            learner = learners[pid]
            for p in learner._parameters():
                dist.broadcast(p.data, src=0)
            learner.kl.value, learner.opponent_weight = kl_value, opponent_weight
            learner.policy.model.train()
            learner._step(*payload)

    def stop(self) -> None:
        """Process 0: release the others (their `follow` returns)."""
        if self.active and self.leads:
            self._send(STOP)

    def close(self) -> None:
        """End the process group this group started. Left to interpreter teardown, the backend's threads
        may still be running when their objects are destroyed, and the process aborts after a finished run."""
        if self._owns and dist.is_initialized():
            dist.destroy_process_group()
            self._owns = False

"""`aux+input` on real parts: the head's prediction shown to the agent before it acts.

What a user relies on: the prediction comes from the hidden state where the agent's own prompt ends
(never from what it is about to be shown); its ids sit in the prompt the action answers, so the
learner scores exactly what was sampled (the KV cache included) and the head trains where it read;
demonstrations show a prediction in the same place; a run with it checkpoints a head that `marl eval`
uses the same way.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from mlflow.tracking import MlflowClient
from run_helpers import game_policy, tiny

import scenarios
from marl.config import OpponentModelConfig
from marl.engine.opponent import DemoHints, build_head, prediction_metrics
from marl.engine.rollout import RolloutWorker
from marl.engine.sequences import episode_sequence
from marl.run.build import load_policy
from marl.run.sft import conversations, demonstration_episodes
from marl.run.train import train
from policies.chat import ChatFormat
from policies.opponent_head import hint_text


@pytest.fixture(scope="module")
def hinted(tmp_path_factory):
    """repeated_game with two agents and a tiny policy whose head feeds its prompt."""
    _, make_env, tokenizer, policy = game_policy(tmp_path_factory.mktemp("runs"), tokenizer_episodes=60)
    policy.opponent_head = build_head(policy.model, make_env(), seed=3)
    policy.opponent_head.feeds_prompt = True
    return make_env, policy, ChatFormat(tokenizer)


def test_the_shown_prediction_is_the_heads_argmax_where_the_prompt_ends(hinted):
    make_env, policy, chat = hinted
    env = make_env()
    obs, _ = env.reset(seed=5)
    prompts = [chat.first(obs[a]["text"]) for a in env.agents]
    gen = policy.generate(prompts, [env.action_grammar(a) for a in env.agents], greedy=True)
    with torch.no_grad():
        for prompt, hint, ids, allowed in zip(prompts, gen.hints, gen.token_ids, gen.allowed, strict=True):
            out = policy.model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
            predicted = policy.opponent_head(out.hidden_states[-1][0, -1:]).argmax(-1)[0].tolist()
            assert hint == chat.encode_text(hint_text(policy.opponent_head.classes, predicted))
            # the first action token is chosen after the hint: greedy is the argmax there
            logits = policy.model(input_ids=torch.tensor([prompt + hint])).logits[0, -1]
            assert ids[0] == max(allowed[0], key=lambda t: float(logits[t]))
    plain = copy.copy(policy)
    plain.opponent_head = copy.deepcopy(policy.opponent_head)
    plain.opponent_head.feeds_prompt = False
    assert plain.generate(prompts, [env.action_grammar(a) for a in env.agents], greedy=True).hints == [[], []]


@pytest.mark.parametrize("turn_cache", [True, False])
def test_the_learner_rescoring_matches_what_was_sampled_after_the_hints(hinted, turn_cache):
    make_env, policy, chat = hinted
    worker = RolloutWorker(make_env, policy, chat, turn_cache=turn_cache)
    batch = worker.collect([1, 2, 3], sample_seed=4)
    assert all(t.hint_len > 0 for t in batch.turns)
    for e in range(len(batch.episodes)):
        piece = episode_sequence(batch, e)  # prompts stay prefixes of the next: hints are in the record
        scores = policy.span_logprobs([piece.sequence], [piece.spans], [[t.allowed for t in piece.turns]],
                                      with_prompt_hidden=True, hint_lengths=[[t.hint_len for t in piece.turns]])
        recorded = [lp for t in piece.turns for lp in t.logprobs]
        torch.testing.assert_close(scores.logprobs[scores.mask.bool()], torch.tensor(recorded), atol=2e-4, rtol=0)
        # the head reads at the assistant marker before each hint, and predicts what it showed
        for k, (start, _) in enumerate(piece.spans):
            hint_len = piece.turns[k].hint_len
            assert piece.sequence[start - 1 - hint_len] == chat.assistant_id
            shown = piece.sequence[start - hint_len : start]
            predicted = policy.opponent_head(scores.prompt_hidden[k : k + 1]).argmax(-1)[0].tolist()
            assert shown == chat.encode_text(hint_text(policy.opponent_head.classes, predicted))
    assert prediction_metrics(policy, batch)["opponent/accuracy"] >= 0.0


def test_demonstrations_show_the_played_class_before_each_action(hinted):
    make_env, policy, chat = hinted
    episodes = demonstration_episodes(RolloutWorker(make_env, None, None), list(range(6)))
    classes = make_env().action_classes()
    truthful = conversations(chat, episodes, DemoHints(classes, 1, noise=0.0, seed=0))
    plain = conversations(chat, episodes)
    for ids, mask, ends, labels, bare, bare_mask in zip(truthful["input_ids"], truthful["assistant_masks"],
                                                        truthful["prompt_ends"], truthful["opponent"],
                                                        plain["input_ids"], plain["assistant_masks"], strict=True):
        assert sum(mask) == sum(bare_mask) > 0  # the same action tokens are trained, the hints never
        for end, label in zip(ends, labels, strict=True):
            assert ids[end] == chat.assistant_id
            shown = chat.encode_text(hint_text(classes, [label[0]]))
            assert ids[end + 1 : end + 1 + len(shown)] == shown and not any(mask[end + 1 : end + 1 + len(shown)])
        assert len(ids) == len(bare) + sum(len(chat.encode_text(hint_text(classes, [lab[0]]))) for lab in labels)
    noisy = DemoHints(classes, 1, noise=1.0, seed=0)
    shown = {tuple(noisy.ids(chat, (0,))) for _ in range(200)}
    assert len(shown) == len(classes)  # all noise: every class, whatever was played


def test_a_run_with_input_checkpoints_a_head_that_eval_shows_the_same_way(tmp_path):
    cfg = tiny(tmp_path, scenario="repeated_game", agents=2, eval_splits=("heldout",),
               opponent=OpponentModelConfig(mode="aux+input"), scenario_options={"rounds": 12})
    result = train(cfg)
    metrics = MlflowClient(cfg.tracking.tracking_uri).get_run(result.run_id).data.metrics
    assert 0.0 <= metrics["eval/heldout/opponent/accuracy/rounds_11_plus"] <= 1.0  # a name MLflow takes
    assert json.loads((result.checkpoint / "opponent_head.json").read_text())["feeds_prompt"] is True
    policy, chat, _ = load_policy(result.checkpoint, device="cpu")
    assert policy.opponent_head.feeds_prompt
    env = scenarios.make("repeated_game", n_agents=2, split="heldout")
    obs, _ = env.reset(seed=0)
    gen = policy.generate([chat.first(obs["agent_0"]["text"])], [env.action_grammar("agent_0")], greedy=True)
    assert gen.hints[0] and chat.tokenizer.decode(gen.hints[0]).strip() in env.action_classes()

"""Fuzz every scenario with hostile action text: generated junk at several agent counts, zero exceptions expected.

An agent's action is text an LLM wrote, so a scenario must turn anything into an invalid action and
an `error:` observation, never an exception. Per scenario and agent count (smallest, middle, largest
it takes), fixed seed: every live agent acts each step, with a hostile value (probability
`--hostile-share`) or the scripted expert's move (so that play reaches deep states: an offer on the
table, a half-solved task, a crowded board). Hostile values come from seven generators:

- `bytes`: random bytes, as `bytes` or decoded as Latin-1 text;
- `huge`: long strings (10k to 200k characters: repeated, random printable, or one JSON value padded);
- `unicode`: odd code points (zero-width, bidi overrides, combining marks, lone surrogates, NUL, emoji, CJK);
- `nested`: deeply nested JSON arrays and objects (depth 50 to 50,000: past Python's recursion limit);
- `big_json`: valid JSON with thousands of keys or items, or one huge string value;
- `near_valid`: the expert's action mutated (a character dropped, inserted or swapped, a value
  replaced by another type or entity, a key renamed, duplicated or added, escapes, trailing junk);
- `typed`: non-string values (None, numbers incl. NaN and inf, lists, dicts, bytes, objects).

Each step's outputs are checked lightly (observation text is a str within the space's length,
rewards finite). Any exception or broken output is recorded with the scenario, count, generator
and a prefix of the value; the run exits 1 if there was any. Prints per scenario and count the
hostile actions, the share the scenario marked invalid, exceptions and seconds; `--out` writes
the same as JSON.

    python benchmarks/fuzz_actions.py --actions 100000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import random
import string
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import scenarios

ODD = ["\u200b", "\u200d", "\u202e", "\u2066", "\ufeff", "\u0301", "\u0000", "\ud800", "\udfff", "\U0001f600",
       "\u4e2d", "\u0627", "\uffff", "\U0010ffff", "\x7f", "\x1b[2J", "\r", "\u2028"]


def gen_bytes(rng: random.Random, expert: str) -> object:
    raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 256)))
    return raw if rng.random() < 0.3 else raw.decode("latin-1")


def gen_huge(rng: random.Random, expert: str) -> object:
    n = rng.randint(10_000, 200_000)
    kind = rng.randrange(3)
    if kind == 0:
        return rng.choice(["x", "{", "\"", "9", " "]) * n
    if kind == 1:
        return "".join(rng.choices(string.printable, k=n))
    return json.dumps({"answer": "y" * n}) if rng.random() < 0.5 else expert + " " * n


def gen_unicode(rng: random.Random, expert: str) -> object:
    junk = "".join(rng.choice(ODD) for _ in range(rng.randint(1, 40)))
    if rng.random() < 0.5 and expert:
        i = rng.randrange(len(expert) + 1)
        return expert[:i] + junk + expert[i:]
    return junk


def gen_nested(rng: random.Random, expert: str) -> object:
    depth = int(10 ** rng.uniform(math.log10(50), math.log10(50_000)))
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def gen_big_json(rng: random.Random, expert: str) -> object:
    kind = rng.randrange(3)
    if kind == 0:
        return json.dumps({f"k{i}": i for i in range(rng.randint(1_000, 20_000))})
    if kind == 1:
        return json.dumps(list(range(rng.randint(1_000, 50_000))))
    return json.dumps({"tool": "post", "args": {"value": "v" * rng.randint(10_000, 100_000)}})


def _mutate_json(rng: random.Random, data: Any) -> Any:
    if isinstance(data, dict) and data:
        key = rng.choice(list(data))
        choice = rng.randrange(5)
        if choice == 0:
            data[key] = rng.choice([None, 1, -1.5, True, [], {}, "", "x" * 600, float("inf")])
        elif choice == 1:
            data[key.upper() if key.upper() != key else key + "_"] = data.pop(key)
        elif choice == 2:
            data[rng.choice(["extra", "tool", "args", "answer", "move", "say", ""])] = rng.choice(["up", 0, None])
        elif choice == 3:
            del data[key]
        else:
            data[key] = _mutate_json(rng, data[key])
    elif isinstance(data, str):
        return rng.choice([data[::-1], data + "x", "", data.upper(), data * 40, "\u00e9" + data])
    return data


def gen_near_valid(rng: random.Random, expert: str) -> object:
    text = expert or "{}"
    kind = rng.randrange(7)
    if kind == 0:
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:]
    if kind == 1:
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(string.printable) + text[i:]
    if kind == 2 and len(text) > 1:
        i = rng.randrange(len(text) - 1)
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    if kind == 3:
        try:
            data = json.loads(text)
        except ValueError:
            return text + rng.choice([" ", "}", "\x00", " say: ", " say: " + "z" * 100])
        return json.dumps(_mutate_json(rng, data), allow_nan=True)
    if kind == 4:
        return text.replace('"', "\\u0022") if rng.random() < 0.5 else text.replace(":", ": " * 50)
    if kind == 5:
        return text + rng.choice(["}", "]", " trailing", "\n" + text, json.dumps(text)])
    return text.replace('"', "'")


def gen_typed(rng: random.Random, expert: str) -> object:
    return rng.choice([None, 0, -7, 3.5, float("nan"), float("inf"), True, [], [expert], {}, {"text": expert},
                       b"{}", expert.encode(), object(), (expert,), 10 ** 400])


GENERATORS = {"bytes": gen_bytes, "huge": gen_huge, "unicode": gen_unicode, "nested": gen_nested,
              "big_json": gen_big_json, "near_valid": gen_near_valid, "typed": gen_typed}
# Costly generators are drawn less often, so a 100k run stays minutes long while each still fires thousands of times.
WEIGHTS = {"bytes": 3, "huge": 0.3, "unicode": 3, "nested": 0.5, "big_json": 0.2, "near_valid": 8, "typed": 2}


def agent_counts(name: str) -> list[int]:
    lo, hi = scenarios.info(name).agent_range
    out = []
    for n in (lo, (lo + hi) // 2, hi):
        try:
            scenarios.make(name, n_agents=n)
        except ValueError:
            continue
        out.append(n)
    return list(dict.fromkeys(out))


def fuzz(name: str, n: int, actions: int, share: float, seed: int) -> dict[str, Any]:
    """Play until `actions` hostile actions were sent; returns counts and the failures found."""
    rng = random.Random(f"{seed}-{name}-{n}")
    env = scenarios.make(name, n_agents=n)
    kinds, weights = list(GENERATORS), [WEIGHTS[k] for k in GENERATORS]
    sent = invalid = episodes = 0
    failures: list[dict[str, str]] = []
    per_kind = dict.fromkeys(GENERATORS, 0)
    start = time.perf_counter()
    while sent < actions:
        env.reset(seed=seed * 1_000_000 + episodes, options={"split": env.splits[episodes % len(env.splits)]})
        episodes += 1
        while env.agents and sent < actions:
            step, hostile = {}, {}
            for agent in env.agents:
                expert = env.expert_action(agent)
                if rng.random() < share:
                    kind = rng.choices(kinds, weights)[0]
                    step[agent] = hostile[agent] = GENERATORS[kind](rng, expert)
                    per_kind[kind] += 1
                else:
                    step[agent] = expert
            sent += len(hostile)
            try:
                obs, rewards, _, _, infos = env.step(step)
                for agent in hostile:
                    text = obs[agent]["text"]
                    if not isinstance(text, str) or len(text) > env.observation_space(agent)["text"].max_length \
                            or not math.isfinite(rewards[agent]):
                        raise AssertionError(f"broken output for {agent}: {text[:80]!r}, reward {rewards[agent]!r}")
                    invalid += bool(infos[agent].get("invalid_action"))
            except Exception:  # noqa: BLE001 - the finding itself: recorded, then a fresh episode
                failures.append({"values": repr({a: repr(v)[:200] for a, v in hostile.items()}),
                                 "traceback": traceback.format_exc(limit=6)})
                break
    return {"scenario": name, "agents": n, "hostile_actions": sent, "invalid_share": invalid / max(sent, 1),
            "episodes": episodes, "exceptions": len(failures), "seconds": time.perf_counter() - start,
            "per_generator": per_kind, "failures": failures[:20]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100_000, help="hostile actions per scenario (split "
                        "evenly over its agent counts)")
    parser.add_argument("--scenarios", nargs="+", default=None, help="default: every registered scenario")
    parser.add_argument("--hostile-share", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for name in args.scenarios or scenarios.names():
        counts = agent_counts(name)
        for n in counts:
            row = fuzz(name, n, -(-args.actions // len(counts)), args.hostile_share, args.seed)
            rows.append(row)
            print(f"{name} n={n}: {row['hostile_actions']:,} hostile actions, {row['invalid_share']:.3f} marked "
                  f"invalid, {row['exceptions']} exceptions, {row['seconds']:.1f} s "
                  f"({row['hostile_actions'] / max(row['seconds'], 1e-9):,.0f}/s)", flush=True)
            for failure in row["failures"][:3]:
                print(failure["values"][:300] + "\n" + failure["traceback"], flush=True)
    total = sum(r["hostile_actions"] for r in rows)
    errors = sum(r["exceptions"] for r in rows)
    print(f"\n{total:,} hostile actions over {len(rows)} scenario/count pairs, {errors} exceptions, "
          f"{sum(r['seconds'] for r in rows):.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

"""Facts that change over time: the current value ranks first for "current" questions, the then-valid
one for questions as of a past time. A deterministic generated corpus: each person moves two or three
times, stated in varied words, stored in shuffled order (an older fact is often stored later), among
distractors that name the same people and places. Reported with and without supersession."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from memoria_pg import Config, HashEmbedder, MemorySystem

PEOPLE = [f"{first} {last}" for first, last in zip(
    "Alice Bruno Chiara Dmitri Elena Farid Greta Hiro Ines Jonas Kemal Lena Marek Nadia Oscar Petra Quentin Rosa "
    "Sami Tilde Umar Vera Wim Xenia Yusuf Zora Anouk Bjorn Clara Dario".split(),
    "Novak Rossi Berg Okafor Lindqvist Haddad Moreau Tanaka Silva Weber Aydin Kowal Dvorak Rahman Costa Horvat "
    "Blanc Ortiz Nieminen Fischer Qureshi Petrov Jansen Volkova Demir Marin Visser Olsen Ferreira Conti".split())]  # fmt: skip
CITIES = ["Paris", "Berlin", "Lisbon", "Oslo", "Vienna", "Prague", "Dublin", "Madrid", "Warsaw", "Athens",
          "Zurich", "Helsinki"]  # fmt: skip
MOVES = ("{p} lives in {c}.", "{p} moved to {c}.", "{p} relocated to {c} for work.", "{p} is living in {c} now.")
DISTRACT = ("{p} visited {c} last spring.", "{p} talked about the museums of {c}.", "{p} wants to see {c} someday.",
            "{p} met an old friend from {c}.")  # fmt: skip
START = dt.datetime(2012, 1, 1, tzinfo=dt.UTC)


def corpus(seed: int = 5) -> tuple[list[dict], list[tuple[str, str, dt.datetime | None]]]:
    rnd = random.Random(seed)
    records, questions = [], []
    for person in PEOPLE:
        cities = rnd.sample(CITIES, 3 + rnd.randint(0, 1))
        times = sorted(START + dt.timedelta(days=rnd.randint(0, 4000)) for _ in cities)
        for city, when in zip(cities, times):
            records.append({"content": rnd.choice(MOVES).format(p=person, c=city), "created_at": when,
                            "tenant": "t", "_city": city})  # fmt: skip
        for _ in range(3):
            records.append({"content": rnd.choice(DISTRACT).format(p=person, c=rnd.choice(CITIES)), "tenant": "t",
                            "created_at": START + dt.timedelta(days=rnd.randint(0, 4500))})  # fmt: skip
        questions.append((f"Where does {person} live?", cities[-1], None))
        for i in range(len(cities) - 1):  # as of a time between two moves: the earlier city
            gap = (times[i + 1] - times[i]) / 2
            questions.append((f"Where does {person} live?", cities[i], times[i] + gap))
    rnd.shuffle(records)
    return records, questions


def score(system: MemorySystem, questions: list[tuple[str, str, dt.datetime | None]]) -> tuple[float, float]:
    embedder = HashEmbedder()
    hits = {"now": [0, 0], "as_of": [0, 0]}
    for text, city, as_of in questions:
        top = system.query(text, tenant="t", top_k=1, as_of=as_of, embedding=embedder.embed([text])[0]).memories
        kind = "now" if as_of is None else "as_of"
        hits[kind][0] += bool(top) and city in top[0].content and not any(w in top[0].content for w in DISTRACTED)
        hits[kind][1] += 1
    return hits["now"][0] / hits["now"][1], hits["as_of"][0] / hits["as_of"][1]


DISTRACTED = ("visited", "talked about", "wants to see", "met an")  # a distractor naming the city is wrong


def _stored(config: Config, records: list[dict]) -> MemorySystem:
    system = MemorySystem(config, embedder=HashEmbedder())
    system.store_many([{k: v for k, v in r.items() if not k.startswith("_")} for r in records])
    return system


@pytest.mark.parametrize("supersession", [True, False], ids=["with", "without"])
def test_current_and_as_of_answers(config: Config, supersession: bool, capsys):
    records, questions = corpus()
    cfg = config if supersession else config.replace(single_valued_attributes=())
    with _stored(cfg, records) as system:
        now, then = score(system, questions)
    with capsys.disabled():
        print(
            f"\nsupersession {'on' if supersession else 'off'}: current value first {now:.3f}, "
            f"then-valid value first (as_of) {then:.3f} over {len(questions)} questions"
        )
    if supersession:
        assert now >= 0.95 and then >= 0.90

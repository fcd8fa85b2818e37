import pytest

from memoria_pg.config import DEFAULT_MEMORY_TYPES
from memoria_pg.core.text import tokenize
from memoria_pg.errors import InputError
from memoria_pg.query.processor import QueryProcessor, candidate_ngrams, subject_attribute

KNOWN = {"bob": "Bob", "new york": "New York", "acme corp": "Acme Corp", "zoë": "Zoë"}


def lookup(grams):
    lookup.calls.append(list(grams))
    return [KNOWN[g] for g in grams if g in KNOWN]


lookup.calls = []


@pytest.fixture
def qp():
    return QueryProcessor(DEFAULT_MEMORY_TYPES, entity_lookup=lookup)


def test_basic_fields(qp):
    q = qp.process("  What is   Alice's favourite colour? ", "t1")
    assert q.text == "  What is   Alice's favourite colour? "
    assert q.normalized == "What is Alice's favourite colour?"
    assert q.tokens == tokenize(q.normalized) == ["alic", "favourit", "colour"]  # Snowball stems
    assert q.tenant == "t1"
    assert (q.subject, q.attribute) == ("Alice", "favourite colour")
    assert q.entities == ["Alice"]
    assert q.metadata == {"original_tokens": q.tokens, "expanded_tokens": q.tokens}


@pytest.mark.parametrize(
    "text, subject, attribute",
    [
        ("what is Alice's favourite colour", "Alice", "favourite colour"),
        ("What's Alice's favorite color?", "Alice", "favourite colour"),
        ("Alice's employer", "Alice", "employer"),
        ("where does Bob live", "Bob", "location"),
        ("Where is Bob from?", "Bob", "hometown"),
        ("when is Carol's birthday", "Carol", "birthday"),
        ("when was Carol born?", "Carol", "birthday"),
        ("who is Dave's manager", "Dave", "manager"),
        ("who does Eve work for", "Eve", "employer"),
        ("how old is Mary Jane?", "Mary Jane", "age"),
        ("What's the name of Alice's dog?", "Alice", "dog name"),
        ("what is Alice's dog's name", "Alice", "dog name"),
        ("Tell me about Alice's new job at Acme", "Alice", "new job"),
        ("what does Alice like", "Alice", "likes"),
    ],
)
def test_subject_attribute_patterns(qp, text, subject, attribute):
    q = qp.process(text, "t1")
    assert (q.subject, q.attribute) == (subject, attribute)
    assert subject in q.entities


def test_lower_case_subject_takes_known_spelling(qp):
    q = qp.process("where does bob live", "t1")
    assert (q.subject, q.attribute) == ("Bob", "location")
    assert q.entities == ["Bob"]


@pytest.mark.parametrize(
    "text", ["where does he live", "what does it look like", "Alice's is closed", "how do I reset the router"]
)
def test_no_subject_attribute(text):
    assert subject_attribute(text) == (None, None)


def test_first_person_subject_needs_speaker(qp):
    assert qp.process("what is my favourite food", "t1").subject is None
    q = qp.process("what is my favourite food", "t1", speaker="Sam")
    assert (q.subject, q.attribute) == ("Sam", "favourite food")


@pytest.mark.parametrize(
    "text, hint",
    [
        ("how do I reset my router", "procedural"),
        ("steps to bake bread", "procedural"),
        ("which editor do I prefer", "preference"),
        ("what is Alice's favourite colour", "preference"),
        ("does Bob like jazz", "preference"),
        ("when did we go to the beach", "episodic"),
        ("what did I eat yesterday", "episodic"),
        ("what happened last week", "episodic"),
        ("remember when we met Bob", "episodic"),
        ("what does ephemeral mean", "semantic"),
        ("what does it look like", None),
        ("Alice's employer", None),
    ],
)
def test_memory_type_hint_cues(qp, text, hint):
    assert qp.process(text, "t1").memory_type_hint == hint


def test_explicit_memory_type_wins(qp):
    assert qp.process("how do I reset my router", "t1", memory_type="fact").memory_type_hint == "fact"


def test_hint_only_for_configured_types():
    qp = QueryProcessor(("general", "episodic"))
    assert qp.process("how do I reset my router", "t1").memory_type_hint is None
    assert qp.process("when did we go to the beach", "t1").memory_type_hint == "episodic"


def test_unknown_explicit_memory_type_rejected(qp):
    with pytest.raises(InputError, match="unknown memory_type 'bogus'"):
        qp.process("anything", "t1", memory_type="bogus")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "query is empty"),
        ("   \n\t ", "query is empty"),
        ("abc\x00def", "NUL byte"),
    ],
)
def test_invalid_queries(qp, text, message):
    with pytest.raises(InputError, match=message):
        qp.process(text, "t1")


def test_max_chars():
    qp = QueryProcessor(DEFAULT_MEMORY_TYPES, max_chars=10)
    assert qp.process("x" * 10, "t1").tokens == ["x" * 10]
    with pytest.raises(InputError, match="11 characters; the limit is 10"):
        qp.process("x" * 11, "t1")
    with pytest.raises(InputError):
        QueryProcessor(DEFAULT_MEMORY_TYPES).process("word " * 801, "t1")


def test_empty_tenant_rejected(qp):
    with pytest.raises(InputError, match="tenant"):
        qp.process("hello", " ")


def test_lookup_receives_lowercase_ngrams_and_finds_lowercase_entities(qp):
    lookup.calls.clear()
    q = qp.process("when did we fly to new york with bob", "t1")
    assert q.entities == ["New York", "Bob"]
    assert q.phrases == ["New York"]
    grams = lookup.calls[-1]
    assert "new york" in grams and "bob" in grams
    assert all(g == g.lower() for g in grams) and all(1 <= len(g.split()) <= 3 for g in grams)


def test_candidate_ngrams_skip_stopword_edges():
    grams = candidate_ngrams("Bank of America and the Beatles")
    assert {"bank", "bank of america", "america", "the beatles", "beatles"} <= set(grams)
    assert not {"of", "the", "and", "bank of", "of america", "and the"} & set(grams)


def test_without_lookup_capitalized_names_and_phrases(qp):
    q = QueryProcessor(DEFAULT_MEMORY_TYPES).process("Did Mary Jane visit New York with Bob?", "t1")
    assert q.entities == ["Mary Jane", "New York", "Bob"]
    assert q.phrases == ["Mary Jane", "New York"]


def test_metacharacters_and_unicode_survive_verbatim(qp):
    text = 'what did "Zoë\'s café; $$ DROP TABLE x; --" say about {José García} \\ in Zürich?'
    q = qp.process(text, "t1")
    quoted = "Zoë's café; $$ DROP TABLE x; --"
    assert q.phrases[0] == quoted
    assert quoted in q.entities
    assert {"José García", "Zürich", "Zoë"} <= set(q.entities)
    assert "José García" in q.phrases
    assert "café" in q.tokens and "zürich" in q.tokens


def test_lowercase_quoted_span_is_phrase_and_entity(qp):
    q = qp.process('find notes about "red velvet cake"', "t1")
    assert q.phrases == ["red velvet cake"]
    assert q.entities == ["red velvet cake"]


def test_token_lists_are_independent(qp):
    q = qp.process("red cars", "t1")
    q.tokens.append("automobile")
    assert q.metadata["original_tokens"] == q.metadata["expanded_tokens"] == ["red", "car"]


def test_expander_adds_tokens_and_keeps_original():
    qp = QueryProcessor(DEFAULT_MEMORY_TYPES, expander=lambda toks: ["automobile", *toks] if "car" in toks else [])
    q = qp.process("my car broke", "t1")
    assert q.metadata["original_tokens"] == ["car", "broke"]
    assert q.metadata["expanded_tokens"] == ["car", "broke", "automobile"]
    assert q.tokens == ["car", "broke", "automobile"]

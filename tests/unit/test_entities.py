import pytest

from memoria_pg.core.entities import (
    ATTRIBUTE_SYNONYMS,
    EntityExtractor,
    RuleBasedExtractor,
    canonical_attribute,
    capitalized_names,
    entity_key,
    extract_attributes,
    extract_entities,
    known_mentions,
    quoted_spans,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Alice met Bob in Paris.", ["Alice", "Bob", "Paris"]),
        ("We flew to New York with Mary Jane.", ["New York", "Mary Jane"]),
        ("She works at the Bank of America.", ["Bank of America"]),
        ("The weather was nice. Yesterday I saw Carol.", ["Carol"]),
        ("What did Dave say on Monday in March?", ["Dave"]),
        ("Dr. Smith visited Jean-Luc and O'Brien.", ["Smith", "Jean-Luc", "O'Brien"]),
        ("Zoë and José García drank café in Zürich.", ["Zoë", "José García", "Zürich"]),
        ("Alice's dog likes Bob's cat.", ["Alice", "Bob"]),
        ("nothing capitalized here", []),
    ],
)
def test_extract_entities_rules(text, expected):
    assert extract_entities(text) == expected


def test_sentence_initial_name_kept_but_starter_dropped():
    assert extract_entities("Paris is lovely. The Louvre too.") == ["Paris", "Louvre"]


def test_known_names_found_case_insensitively_with_stored_spelling():
    found = extract_entities("i had lunch with bob smith at acme corp's office", known=["Bob Smith", "ACME Corp"])
    assert found == ["Bob Smith", "ACME Corp"]


def test_known_prefers_longest_match():
    assert [n for _, n in known_mentions("we visited new york city", ["New York", "New York City", "York"])] == [
        "New York City"
    ]


def test_known_spelling_wins_over_rule_spelling():
    assert extract_entities("Then I met BOB today.", known=["Bob"]) == ["Bob"]


def test_quoted_names_are_entities_but_lowercase_quotes_are_not():
    text = 'Alice read "The Old Man and the Sea" and said "sure thing".'
    entities = extract_entities(text)
    assert "The Old Man and the Sea" in entities
    assert "sure thing" not in entities


def test_quoted_spans_variants_and_metacharacters():
    text = 'a "x; $$ \\ {y}" b “Zoë’s café” c « Ünïcødé »'
    assert quoted_spans(text) == ["x; $$ \\ {y}", "Zoë’s café", "Ünïcødé"]


def test_capitalized_names_multiword():
    assert capitalized_names("We met Ada Lovelace and Leonardo da Vinci.") == ["Ada Lovelace", "Leonardo da Vinci"]


def test_entity_key_ignores_case_possessive_and_curly_apostrophe():
    assert entity_key("Alice’s") == entity_key("alice") == "alice"
    assert entity_key("  New   YORK ") == "new york"


def test_rule_based_extractor_satisfies_protocol_and_is_callable():
    extractor: EntityExtractor = RuleBasedExtractor()
    assert extractor.extract("Bob met alice", known=["Alice"]) == ["Bob", "Alice"]
    assert RuleBasedExtractor()("Bob met Alice") == ["Bob", "Alice"]


@pytest.mark.parametrize(
    "text, speaker, expected",
    [
        ("Alice's favourite colour is blue.", None, ("Alice", "favourite colour", "blue")),
        ("Alice's favorite color is blue.", None, ("Alice", "favourite colour", "blue")),
        ("My favourite food is pizza", "Sam", ("Sam", "favourite food", "pizza")),
        ("Bob lives in Paris", None, ("Bob", "location", "Paris")),
        ("Bob is based in Lyon.", None, ("Bob", "location", "Lyon")),
        ("Carol works at Acme.", None, ("Carol", "employer", "Acme")),
        ("Carol works for Bank of America", None, ("Carol", "employer", "Bank of America")),
        ("I work as a nurse.", "Sam", ("Sam", "occupation", "nurse")),
        ("I'm 30 years old", "Sam", ("Sam", "age", "30")),
        ("Dave was born on March 3, 1990.", None, ("Dave", "birthday", "March 3, 1990")),
        ("Dave was born in 1990.", None, ("Dave", "birth year", "1990")),
        ("Dave was born in Oslo.", None, ("Dave", "birthplace", "Oslo")),
        ("Bob's birthday is on May 3", None, ("Bob", "birthday", "May 3")),
        ("Alice has a dog named Rex.", None, ("Alice", "dog name", "Rex")),
        ("My cat's name is Tom.", "Sam", ("Sam", "cat name", "Tom")),
        ("Yesterday Alice's dog Rex chased a ball.", None, ("Alice", "dog name", "Rex")),
        ("Eve is married to Frank.", None, ("Eve", "spouse", "Frank")),
        ("I'm from Zürich", "Sam", ("Sam", "hometown", "Zürich")),
        ("José García works for Telefónica.", None, ("José García", "employer", "Telefónica")),
    ],
)
def test_extract_attributes(text, speaker, expected):
    assert extract_attributes(text, speaker=speaker) == [expected]


def test_first_person_without_speaker_is_dropped():
    assert extract_attributes("My favourite food is pizza. I live in Rome.") == []


def test_value_stops_at_clause_boundary():
    assert extract_attributes("When I lived in Berlin I was happy", speaker="Sam") == [("Sam", "location", "Berlin")]
    assert extract_attributes("Bob lives in Paris with his wife, Eve.") == [("Bob", "location", "Paris")]


def test_several_attributes_in_text_order():
    text = "Mary Jane lives in Oslo. Her boss is Tom. Mary Jane works at Acme."
    assert extract_attributes(text) == [("Mary Jane", "location", "Oslo"), ("Mary Jane", "employer", "Acme")]


def test_no_age_from_other_numbers():
    assert extract_attributes("Bob is 5 minutes away") == []


@pytest.mark.parametrize(
    "phrase, canonical",
    [
        ("Favorite Color", "favourite colour"),
        ("lives", "location"),
        ("live", "location"),
        ("located", "location"),
        ("works at", "employer"),
        ("work for", "employer"),
        ("employer", "employer"),
        ("job", "occupation"),
        ("dog's name", "dog name"),
        ("the wife", "spouse"),
        ("boss", "manager"),
    ],
)
def test_canonical_attribute(phrase, canonical):
    assert canonical_attribute(phrase) == canonical


def test_synonym_table_is_lower_case_and_maps_to_canonical_names():
    assert all(k == k.lower() for k in ATTRIBUTE_SYNONYMS)
    assert {ATTRIBUTE_SYNONYMS[v] for v in set(ATTRIBUTE_SYNONYMS.values())} == set(ATTRIBUTE_SYNONYMS.values())

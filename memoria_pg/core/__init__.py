"""The ground floor both wings stand on: the plain data types, validation, text normalization,
entity extraction and embedders. Nothing here touches the database."""

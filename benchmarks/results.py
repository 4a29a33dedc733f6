"""A benchmark's saved figures (benchmarks/plots/*.json and the kept records beside this file): pydantic
models, written and read through the models alone, so a file says what its model says.

Every field of a saved file is a field of its model (`extra="forbid"`: a key the model does not
know fails the load instead of being dropped); fields added since a file was written take their
defaults. Names are the Python ones, or camelCase for a `CamelRecord` (as the Kubernetes-style
files are written). A file of records each under a key of its own (a cluster size, a run's label)
is a `KeyedRecords`. A figure not measured (NaN) is written as null; files are read with pydantic's
JSON parser, which also takes the bare NaN that json.dumps wrote into older files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, RootModel
from pydantic.alias_generators import to_camel

S = TypeVar("S", bound="SavedFile")
K = TypeVar("K")
V = TypeVar("V")

# camelCase names in the file, the Python names accepted too: for a CamelRecord and for the pydantic
# dataclasses saved inside one.
CAMEL_CASE = ConfigDict(alias_generator=to_camel, populate_by_name=True)


def _nan_for_null(value: Any) -> Any:
    # One NaN object for every figure not measured, so that models holding one still compare equal.
    return math.nan if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _null_for_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


# A float that may be NaN (a figure not measured): null in the file, as orjson writes a NaN.
NanFloat = Annotated[float, BeforeValidator(_nan_for_null), PlainSerializer(_null_for_nan, when_used="json")]


class SavedFile(BaseModel):
    """What a saved file's model does: its document, written to and read from the file."""

    def document(self) -> Any:
        """The document as saved: JSON types, each field under its name in the file."""
        return self.model_dump(mode="json", by_alias=True)

    def to_file(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(self.document(), option=orjson.OPT_INDENT_2))

    @classmethod
    def from_file(cls: type[S], path: Path) -> S:
        return cls.model_validate_json(path.read_bytes())


class Record(SavedFile):
    """A saved benchmark figure, or a part of one."""

    model_config = ConfigDict(extra="forbid")


class KeyedRecords(SavedFile, RootModel[dict[K, V]], Generic[K, V]):
    """A saved file that is a mapping, {key: record}: the figures of each cluster size, the timings
    of each labelled run. A subclass names the key's and the record's types."""


class CamelRecord(Record):
    """A Record whose file names its fields in camelCase (Python's snake_case names work too)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

"""includeObject of a Table request, checked before anything is answered (a watch's stream included)."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from colocation.apimachinery.errors import ApiError
from colocation.apimachinery.tables import include_object


@pytest.mark.parametrize(("raw", "value"), [(None, "Metadata"), ("", "Metadata"), ("Object", "Object"),
                                            ("None", "None"), ("Metadata", "Metadata")])
def test_include_object_defaults_to_metadata(raw: str | None, value: str) -> None:
    assert include_object(MultiDict() if raw is None else MultiDict({"includeObject": raw})) == value


def test_an_unknown_include_object_is_400_as_upstream_words_it() -> None:
    with pytest.raises(ApiError) as caught:
        include_object(MultiDict({"includeObject": "object"}))
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        400, "BadRequest", "Unable to convert to Table as requested: includeObject: Invalid value: \"object\": "
                           "must be 'Metadata', 'Object', 'None', or empty")

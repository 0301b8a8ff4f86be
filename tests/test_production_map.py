"""production_map: every row of chapter 10's map is well formed and every book symbol it names exists."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pagedkv_edu.sim import production_map as pm

HEX40 = re.compile(r"^[0-9a-f]{40}$")


@pytest.mark.parametrize("row", pm.IMPLEMENTATIONS, ids=lambda r: f"{r.concept}-{r.project}-{r.symbol}")
def test_every_row_is_complete(row: pm.Implementation) -> None:
    assert row.project in {"vLLM", "FlashInfer", "SGLang", "nano-vllm", "transformers"}
    assert row.repo == pm.REPOSITORIES[row.project]
    for name in ("path", "symbol", "note"):
        assert getattr(row, name).strip(), f"empty {name}"
    assert HEX40.match(row.commit), row.commit
    assert row.concept in {c.key for c in pm.CONCEPTS}
    assert row.url == f"https://github.com/{row.repo}/blob/{row.commit}/{row.path}"


def test_rows_are_unique() -> None:
    keys = [(r.concept, r.project, r.path, r.symbol) for r in pm.IMPLEMENTATIONS]
    assert len(keys) == len(set(keys))


def test_one_file_is_always_cited_at_the_same_commit() -> None:
    """A file read once is cited at one version; two commits for one path would mean a copy-paste slip."""
    seen: dict[tuple[str, str], str] = {}
    for r in pm.IMPLEMENTATIONS:
        assert seen.setdefault((r.repo, r.path), r.commit) == r.commit, r.path


@pytest.mark.parametrize("concept", pm.CONCEPTS, ids=lambda c: c.key)
def test_book_symbols_resolve(concept: pm.Concept) -> None:
    if concept.book_symbol is None:
        assert "planned" in concept.chapter or "not in the book" in concept.chapter
        return
    assert pm.resolve(concept.book_symbol) is not None


def test_every_concept_has_rows_from_several_projects() -> None:
    for key, per_project in pm.coverage().items():
        assert sum(n > 0 for n in per_project.values()) >= 2, key
        assert per_project["vLLM"] > 0, key


def test_the_guides_claims_about_vllm_are_rows() -> None:
    """The chapter's headline differences each rest on a row, not on prose alone."""
    symbols = {(r.project, r.symbol) for r in pm.IMPLEMENTATIONS}
    for needed in [("vLLM", "FreeKVCacheBlockQueue"), ("vLLM", "BlockPool.touch"),
                   ("vLLM", "BlockPool._maybe_evict_cached_block"), ("vLLM", "hash_block_tokens"),
                   ("vLLM", "KVCacheManager.get_computed_blocks"), ("SGLang", "RadixCache.match_prefix"),
                   ("FlashInfer", "BatchDecodeWithPagedKVCacheWrapper.plan"),
                   ("SGLang", "TritonAttnBackend.get_num_kv_splits")]:
        assert needed in symbols, needed


def test_bad_rows_are_rejected() -> None:
    good = pm.IMPLEMENTATIONS[0]
    with pytest.raises(ValueError, match="unknown project"):
        dataclasses.replace(good, project="TensorRT-LLM")
    with pytest.raises(ValueError, match="lives in"):
        dataclasses.replace(good, repo="someone/vllm")
    with pytest.raises(ValueError, match="40 lowercase hex"):
        dataclasses.replace(good, commit="abc123")
    with pytest.raises(ValueError, match="empty symbol"):
        dataclasses.replace(good, symbol=" ")
    with pytest.raises(ValueError, match="neither 'planned'"):
        pm.Concept("x", "X", "3", None)


def test_resolve_reports_bad_symbols() -> None:
    with pytest.raises(ValueError, match="module:attribute"):
        pm.resolve("pagedkv_edu.core.block_pool")
    with pytest.raises(AttributeError):
        pm.resolve("pagedkv_edu.core.block_pool:NoSuchPool")
    with pytest.raises(KeyError, match="no concept"):
        pm.rows_for("paging")


def test_html_table_escapes_and_links() -> None:
    table = pm.html_table("store")
    assert table.count("<tr>") == 1 + len(pm.rows_for("store"))
    assert "<code>if slot == -1: return</code>" in table
    assert "num_tokens - 1" in pm.html_table("prefix")
    for r in pm.rows_for("store"):
        assert f'href="{r.url}"' in table


def test_concepts_cite_the_chapters_that_teach_them() -> None:
    """Chapter numbers after the chapter-7 split: store 3, admission 6, prefix caching 8, block size 9."""
    chapters = {c.key: c.chapter for c in pm.CONCEPTS}
    assert (chapters["store"], chapters["admission"], chapters["sharing"], chapters["prefix"],
            chapters["block-size"]) == ("3", "6", "7", "8", "9")


def test_the_rows_are_data_in_a_packaged_file_and_load_checks_them(tmp_path) -> None:
    """The map is a JSON file shipped with the package; load() refuses a row citing a file at two commits."""
    import json
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert pm.DATA.relative_to(root / "pagedkv_edu").as_posix() in [p.replace("*", "production_map") for p in
                                                                    package_data["pagedkv_edu"]]
    assert pm.load() == pm.ProductionMap(pm.CONCEPTS, pm.IMPLEMENTATIONS, pm.NOT_VERIFIED)
    data = json.loads(pm.DATA.read_text())
    first = data["implementations"][0]
    data["implementations"].append({**first, "commit": "0" * 40})
    (tmp_path / "map.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{first['path']} is cited at two commits"):
        pm.load(tmp_path / "map.json")
    data["implementations"][-1] = {**first, "concept": "teleportation"}
    (tmp_path / "map.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="'teleportation'"):
        pm.load(tmp_path / "map.json")

"""vitbook.data.text_datasets: AG News, TREC and GloVe, their readers, and the fallback."""

from __future__ import annotations

import json

import pytest

from vitbook.data import network
from vitbook.data import text_data as td
from vitbook.data import text_datasets as tds
from vitbook.data.download import DownloadError


def test_getters_fall_back_offline(capsys) -> None:
    data = tds.get_ag_news()
    out = capsys.readouterr().out
    assert data.stand_in and len(data.class_names) == 4
    assert out.count("[STAND-IN]") == 1 and "AG News" in out
    trec = tds.get_trec()
    assert trec.stand_in and len(trec.class_names) == 6
    assert capsys.readouterr().out.count("[STAND-IN]") == 1


@pytest.mark.parametrize("getter", [tds.get_ag_news, tds.get_trec])
def test_no_fallback_offline_raises(getter) -> None:
    with pytest.raises(DownloadError, match=r"set_offline\(True\)"):
        getter(fallback=False)


def test_failed_download_falls_back_or_raises(monkeypatch, capsys, online) -> None:

    def refuse(source, destination, **kwargs):
        raise DownloadError(f"Could not download {source}: network error (test)")

    monkeypatch.setattr(tds, "download_data", refuse)
    data = tds.get_trec()
    out = capsys.readouterr().out
    assert (
        data.stand_in
        and "[INFO] Could not get TREC" in out
        and out.count("[STAND-IN]") == 1
    )
    with pytest.raises(DownloadError, match="network error"):
        tds.get_ag_news(fallback=False)


def test_readers_parse_the_real_formats(tmp_path, monkeypatch) -> None:
    trec = tmp_path / "TREC_10.label"
    trec.write_bytes(
        b"LOC:city Where is the sister\xf0city ?\nNUM:date When was it built ?\n"
    )
    texts, labels = tds.read_trec_labels(trec)
    assert labels == [tds.TREC_CLASSES.index("LOC"), tds.TREC_CLASSES.index("NUM")]
    assert texts[1] == "When was it built ?"
    ag = tmp_path / "train.jsonl"
    rows = [
        {"text": "Stocks rise", "label": 2, "label_text": "Business"},
        {"text": "Win", "label": 1},
    ]
    ag.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert tds.read_ag_news_jsonl(ag) == (["Stocks rise", "Win"], [2, 1])
    ag.write_text('{"title": "no text field"}\n')
    with pytest.raises(ValueError, match="not an AG News record"):
        tds.read_ag_news_jsonl(ag)

    # Online with already-downloaded files: the getter reads them (download_data skips).
    network.set_offline(False)  # the autouse fixture restores it
    for split in ("train", "test"):
        folder = tmp_path / "data" / f"ag_news_{split}"
        folder.mkdir(parents=True)
        (folder / f"{split}.jsonl").write_text(json.dumps(rows[0]) + "\n")
    data = tds.get_ag_news(root=tmp_path / "data")
    assert (
        not data.stand_in
        and data.train_texts == ["Stocks rise"]
        and data.class_names[2] == "Business"
    )


def test_word_vectors(tmp_path) -> None:
    vocab = td.Vocabulary.build(["cat dog emu"])
    path = tmp_path / "vectors.txt"
    path.write_text("cat 1.0 2.0\nzebra 9 9\ndog -1 0.5\n")
    weights, found = tds.read_word_vectors(path, vocab, dim=2)
    assert weights.shape == (len(vocab), 2) and found == 2
    assert (
        weights[vocab["cat"]].tolist() == [1.0, 2.0] and weights[td.PAD_ID].eq(0).all()
    )
    assert weights[vocab["emu"]].abs().sum() > 0  # missing word: random, not zero
    with pytest.raises(DownloadError, match=r"set_offline\(True\)"):
        tds.get_glove(vocab, dim=50)
    with pytest.raises(ValueError, match="50, 100, 200 or 300"):
        tds.get_glove(vocab, dim=64)

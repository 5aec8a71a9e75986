"""Standard layouts, built as tiny directories with the publishers' file names and formats.

Layout readers only need the video files to exist, so empty files stand in for videos here;
`test_prepare.py` runs real videos through a layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vidscale.data.annotations import AnnotationError
from vidscale.data.layouts import read_layout


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# UCF101 --------------------------------------------------------------------------------------

UCF_CLASSES = ["ApplyEyeMakeup", "Archery", "HandstandPushups"]
UCF_VIDEOS = {  # class -> videos (note the file-name spelling "HandStandPushups" upstream)
    "ApplyEyeMakeup": ["v_ApplyEyeMakeup_g01_c01.avi", "v_ApplyEyeMakeup_g08_c01.avi"],
    "Archery": ["v_Archery_g01_c01.avi", "v_Archery_g08_c02.avi"],
    "HandstandPushups": ["v_HandStandPushups_g01_c01.avi", "v_HandStandPushups_g08_c01.avi"],
}


@pytest.fixture
def ucf(tmp_path: Path) -> Path:
    lists = tmp_path / "ucfTrainTestlist"
    write(lists / "classInd.txt", "".join(f"{i} {c}\r\n" for i, c in enumerate(UCF_CLASSES, 1)))
    for c, videos in UCF_VIDEOS.items():
        for v in videos:
            touch(tmp_path / "UCF-101" / c / v)
    # split 1: g08 trains, g01 tests; split 2 the other way round
    for split, (train_g, test_g) in {1: ("g08", "g01"), 2: ("g01", "g08")}.items():
        train = [
            f"{c}/{v} {UCF_CLASSES.index(c) + 1}"
            for c, vs in UCF_VIDEOS.items()
            for v in vs
            if train_g in v
        ]
        test = [f"{c}/{v}" for c, vs in UCF_VIDEOS.items() for v in vs if test_g in v]
        write(lists / f"trainlist0{split}.txt", "\n".join(train) + "\n")
        write(lists / f"testlist0{split}.txt", "\n".join(test) + "\n")
    return tmp_path


def test_ucf101_reads_class_index_and_both_lists(ucf: Path) -> None:
    splits = read_layout("ucf101", ucf, split=1)
    assert splits.classes == UCF_CLASSES
    assert [(r.path.name, r.label) for r in splits.train] == [
        ("v_ApplyEyeMakeup_g08_c01.avi", 0),
        ("v_Archery_g08_c02.avi", 1),
        ("v_HandStandPushups_g08_c01.avi", 2),
    ]
    # test lists carry no label: it comes from the directory name
    assert [r.label for r in splits.val] == [0, 1, 2]
    assert all("g01" in r.path.name for r in splits.val)
    assert splits.missing == []
    other = read_layout("ucf101", ucf, split=2)
    assert {r.path for r in other.train} == {r.path for r in splits.val}


def test_ucf101_missing_video_is_an_error_naming_file_and_line(ucf: Path) -> None:
    (ucf / "UCF-101" / "Archery" / "v_Archery_g08_c02.avi").unlink()
    with pytest.raises(AnnotationError, match=r"trainlist01\.txt:2: missing video"):
        read_layout("ucf101", ucf, split=1)
    splits = read_layout("ucf101", ucf, split=1, skip_missing=True)
    assert len(splits.train) == 2
    assert len(splits.missing) == 1
    path, reason = splits.missing[0]
    assert path.endswith("v_Archery_g08_c02.avi") and "trainlist01.txt:2" in reason


def test_ucf101_bad_lines_and_split_number(ucf: Path) -> None:
    write(ucf / "ucfTrainTestlist" / "trainlist01.txt", "Archery/v_Archery_g08_c02.avi 7\n")
    with pytest.raises(AnnotationError, match=r"trainlist01\.txt:1: class index 7"):
        read_layout("ucf101", ucf, split=1)
    with pytest.raises(ValueError, match="split must be 1, 2 or 3"):
        read_layout("ucf101", ucf, split=4)


# Kinetics ------------------------------------------------------------------------------------

KINETICS_HEADER = "label,youtube_id,time_start,time_end,split\n"


@pytest.fixture
def kinetics(tmp_path: Path) -> Path:
    write(
        tmp_path / "train.csv",
        KINETICS_HEADER
        + "air drumming,aaaaaaaaaaa,10,20,train\n"
        + "abseiling,bbbbbbbbbbb,0,10,train\n"
        + '"air drumming",ccccccccccc,5,15,train\n',
    )
    write(tmp_path / "validate.csv", KINETICS_HEADER + "abseiling,ddddddddddd,30,40,val\n")
    # the three naming schemes found in the wild
    touch(tmp_path / "train" / "air drumming" / "aaaaaaaaaaa_000010_000020.mp4")
    touch(tmp_path / "train" / "bbbbbbbbbbb_000000_000010.webm")
    touch(tmp_path / "train" / "air_drumming" / "ccccccccccc.mkv")
    touch(tmp_path / "val" / "ddddddddddd_000030_000040.mp4")
    return tmp_path


def test_kinetics_finds_every_naming_scheme_and_sorts_classes(kinetics: Path) -> None:
    splits = read_layout("kinetics", kinetics)
    assert splits.classes == ["abseiling", "air drumming"]
    assert [(r.path.name, r.label) for r in splits.train] == [
        ("aaaaaaaaaaa_000010_000020.mp4", 1),
        ("bbbbbbbbbbb_000000_000010.webm", 0),
        ("ccccccccccc.mkv", 1),
    ]
    assert [(r.path.parent.name, r.label) for r in splits.val] == [("val", 0)]


def test_kinetics_missing_and_unknown_classes(kinetics: Path) -> None:
    (kinetics / "train" / "bbbbbbbbbbb_000000_000010.webm").unlink()
    with pytest.raises(AnnotationError, match=r"train\.csv:3: missing video"):
        read_layout("kinetics", kinetics)
    splits = read_layout("kinetics", kinetics, skip_missing=True)
    assert len(splits.train) == 2
    assert "bbbbbbbbbbb_000000_000010" in splits.missing[0][0]
    write(kinetics / "validate.csv", KINETICS_HEADER + "juggling,ddddddddddd,30,40,val\n")
    with pytest.raises(AnnotationError, match=r"validate\.csv:2: class 'juggling'"):
        read_layout("kinetics", kinetics, skip_missing=True)
    write(kinetics / "train.csv", "youtube_id,label\n")
    with pytest.raises(AnnotationError, match=r"train\.csv:1: expected a header"):
        read_layout("kinetics", kinetics)


# Names of the training and validation CSVs as each distributor ships them: DeepMind's archives
# (all releases), the CVDF mirror, MMAction2's download_annotations.sh, the ActivityNet crawler,
# and Kinetics-700 copies (2019 and 2020 releases).
KINETICS_TRAIN_NAMES = [
    "train.csv",
    "kinetics_train.csv",
    "kinetics-400_train.csv",
    "kinetics-600_train.csv",
    "kinetics-700_train.csv",
    "kinetics_700_train.csv",
    "kinetics700_2020_train.csv",
]
KINETICS_VAL_NAMES = [
    "validate.csv",
    "val.csv",
    "validation.csv",
    "kinetics_val.csv",
    "kinetics-400_val.csv",
    "kinetics-400_validate.csv",
    "kinetics-600_val.csv",
    "kinetics-600_validate.csv",
    "kinetics-700_val.csv",
    "kinetics-700_validate.csv",
    "kinetics-700_validation.csv",
    "kinetics_700_val.csv",
    "kinetics700_2020_val.csv",
    "kinetics700_2020_validate.csv",
]


def kinetics_csvs(directory: Path, train: str, val: str) -> None:
    """One training clip of each of two classes and one validation clip, named `train`/`val`."""
    write(
        directory / train,
        KINETICS_HEADER + "abseiling,aaaaaaaaaaa,0,10,train\nyoga,bbbbbbbbbbb,5,15,train\n",
    )
    write(directory / val, KINETICS_HEADER + "yoga,ccccccccccc,1,11,val\n")


def kinetics_videos(root: Path, train_dir: str = "train", val_dir: str = "val") -> None:
    touch(root / train_dir / "abseiling" / "aaaaaaaaaaa_000000_000010.mp4")
    touch(root / train_dir / "yoga" / "bbbbbbbbbbb_000005_000015.mp4")
    touch(root / val_dir / "yoga" / "ccccccccccc_000001_000011.mp4")


def assert_kinetics_read(root: Path, *, annotations_dir: Path | None = None) -> None:
    splits = read_layout("kinetics", root, annotations_dir=annotations_dir)
    assert splits.classes == ["abseiling", "yoga"]
    assert [(r.path.name, r.label) for r in splits.train] == [
        ("aaaaaaaaaaa_000000_000010.mp4", 0),
        ("bbbbbbbbbbb_000005_000015.mp4", 1),
    ]
    assert [(r.path.name, r.label) for r in splits.val] == [("ccccccccccc_000001_000011.mp4", 1)]


@pytest.mark.parametrize("name", KINETICS_TRAIN_NAMES)
def test_kinetics_reads_every_published_training_csv_name(tmp_path: Path, name: str) -> None:
    kinetics_csvs(tmp_path / "annotations", name, "validate.csv")
    kinetics_videos(tmp_path)
    assert_kinetics_read(tmp_path)


@pytest.mark.parametrize("name", KINETICS_VAL_NAMES)
def test_kinetics_reads_every_published_validation_csv_name(tmp_path: Path, name: str) -> None:
    kinetics_csvs(tmp_path, "train.csv", name)  # in the root this time
    kinetics_videos(tmp_path)
    assert_kinetics_read(tmp_path)


def test_kinetics_reads_the_mmaction2_layout(tmp_path: Path) -> None:
    """download_annotations.sh renames the CSVs; download_videos.sh writes videos_{train,val}/."""
    kinetics_csvs(tmp_path / "annotations", "kinetics_train.csv", "kinetics_val.csv")
    kinetics_videos(tmp_path, "videos_train", "videos_val")
    assert_kinetics_read(tmp_path)


def test_kinetics_annotations_dir_is_the_only_place_looked_in(tmp_path: Path) -> None:
    kinetics_csvs(tmp_path / "elsewhere", "kinetics-600_train.csv", "kinetics-600_val.csv")
    kinetics_videos(tmp_path)
    assert_kinetics_read(tmp_path, annotations_dir=tmp_path / "elsewhere")
    with pytest.raises(AnnotationError, match="no Kinetics train annotation file"):
        read_layout("kinetics", tmp_path)


def test_kinetics_missing_csv_names_every_file_and_directory_looked_for(tmp_path: Path) -> None:
    write(tmp_path / "annotations" / "kinetics_train.csv", KINETICS_HEADER)
    with pytest.raises(AnnotationError) as caught:
        read_layout("kinetics", tmp_path)
    message = str(caught.value)
    assert (
        f"no Kinetics val annotation file in {tmp_path / 'annotations'} or {tmp_path};" in message
    )
    assert all(name in message for name in KINETICS_VAL_NAMES)
    (tmp_path / "annotations" / "kinetics_train.csv").unlink()
    with pytest.raises(AnnotationError) as caught:
        read_layout("kinetics", tmp_path)
    assert all(name in str(caught.value) for name in KINETICS_TRAIN_NAMES)


def test_kinetics_two_releases_side_by_side_are_refused(tmp_path: Path) -> None:
    """The ActivityNet crawler's data/ holds Kinetics-400's and -600's CSVs together."""
    kinetics_csvs(tmp_path, "kinetics-400_train.csv", "kinetics-400_val.csv")
    kinetics_csvs(tmp_path, "kinetics-600_train.csv", "kinetics-600_val.csv")
    kinetics_videos(tmp_path)
    with pytest.raises(
        AnnotationError,
        match=r"2 Kinetics train annotation files \(kinetics-400_train\.csv, "
        r"kinetics-600_train\.csv\): ambiguous",
    ):
        read_layout("kinetics", tmp_path)


# HMDB51 --------------------------------------------------------------------------------------


def test_hmdb51_tags_select_train_test_and_unused(tmp_path: Path) -> None:
    splits_dir = tmp_path / "testTrainMulti_7030_splits"
    for name in ("wave", "brush_hair"):
        lines = [f"{name}_a.avi 1 ", f"{name}_b.avi 2 ", f"{name}_c.avi 0 "]
        write(splits_dir / f"{name}_test_split1.txt", "\n".join(lines) + "\n")
        write(splits_dir / f"{name}_test_split2.txt", f"{name}_c.avi 1\n{name}_a.avi 2\n")
        for v in "abc":
            touch(tmp_path / name / f"{name}_{v}.avi")
    splits = read_layout("hmdb51", tmp_path, split=1)
    assert splits.classes == ["brush_hair", "wave"]
    assert [(r.path.name, r.label) for r in splits.train] == [
        ("brush_hair_a.avi", 0),
        ("wave_a.avi", 1),
    ]
    assert [r.path.name for r in splits.val] == ["brush_hair_b.avi", "wave_b.avi"]
    assert [r.path.name for r in read_layout("hmdb51", tmp_path, split=2).train] == [
        "brush_hair_c.avi",
        "wave_c.avi",
    ]
    write(splits_dir / "wave_test_split1.txt", "wave_a.avi 1\nwave_b.avi 5\n")
    with pytest.raises(AnnotationError, match=r"wave_test_split1\.txt:2: expected"):
        read_layout("hmdb51", tmp_path, split=1)


# Something-Something v2 ----------------------------------------------------------------------


def test_ssv2_matches_templates_without_brackets(tmp_path: Path) -> None:
    labels = {"Holding something": "0", "Pushing something from left to right": "1"}
    write(tmp_path / "labels" / "labels.json", json.dumps(labels))
    train = [
        {
            "id": "11",
            "label": "pushing a cup",
            "template": "Pushing [something] from left to right",
        },
        {"id": "12", "label": "holding a pen", "template": "Holding [something]"},
    ]
    write(tmp_path / "labels" / "train.json", json.dumps(train, indent=1))
    val = [{"id": "13", "template": "Holding [something]", "placeholders": ["cup"]}]
    write(tmp_path / "labels" / "validation.json", json.dumps(val, indent=1))
    for vid in ("11", "12", "13"):
        touch(tmp_path / "20bn-something-something-v2" / f"{vid}.webm")
    splits = read_layout("ssv2", tmp_path)
    assert splits.classes == ["Holding something", "Pushing something from left to right"]
    assert [(r.path.name, r.label) for r in splits.train] == [("11.webm", 1), ("12.webm", 0)]
    assert [(r.path.name, r.label) for r in splits.val] == [("13.webm", 0)]

    train[1]["template"] = "Juggling [something]"
    text = json.dumps(train, indent=1)
    write(tmp_path / "labels" / "train.json", text)
    line = text.splitlines().index(" {", 2) + 1  # the second object's opening line
    with pytest.raises(
        AnnotationError, match=rf"train\.json:{line}: template 'Juggling something'"
    ):
        read_layout("ssv2", tmp_path)


# generic -------------------------------------------------------------------------------------


def test_generic_reads_classes_and_csvs_and_reports_missing(tmp_path: Path) -> None:
    write(tmp_path / "classes.txt", "left\nright\n")
    write(tmp_path / "train.csv", "path,label\nv/a.mp4,right\nv/b.mp4,0\n")
    write(tmp_path / "val.csv", "path,label\nv/c.mp4,left\n")
    touch(tmp_path / "v" / "a.mp4")
    touch(tmp_path / "v" / "c.mp4")
    with pytest.raises(AnnotationError, match=r"train\.csv:3: missing video"):
        read_layout("generic", tmp_path)
    splits = read_layout("generic", tmp_path, skip_missing=True)
    assert splits.classes == ["left", "right"]
    assert [(r.path.name, r.label) for r in splits.train] == [("a.mp4", 1)]
    assert [(r.path.name, r.label) for r in splits.val] == [("c.mp4", 0)]
    assert splits.missing == [
        (str(tmp_path / "v" / "b.mp4"), f"{tmp_path / 'train.csv'}:3: missing video")
    ]


def test_unknown_layout_and_missing_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown layout 'coco'"):
        read_layout("coco", tmp_path)
    with pytest.raises(AnnotationError, match="not a directory"):
        read_layout("generic", tmp_path / "nope")


def test_the_generic_layout_reads_a_csv_with_a_byte_order_mark(tmp_path: Path) -> None:
    """Spreadsheets save CSV with a UTF-8 byte-order mark: the generic layout reads it as
    `vidscale prepare` does (one parser for both)."""
    (tmp_path / "classes.txt").write_text("a\nb\n")
    for split in ("train", "val"):
        (tmp_path / f"{split}.csv").write_text(
            "path,label\nx.mp4,a\ny.mp4,b\n", encoding="utf-8-sig"
        )
    for name in ("x.mp4", "y.mp4"):
        (tmp_path / name).write_bytes(b"")
    splits = read_layout("generic", tmp_path)
    assert [(r.path.name, r.label) for r in splits.train] == [("x.mp4", 0), ("y.mp4", 1)]
    assert len(splits.val) == 2

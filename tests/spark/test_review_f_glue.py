"""Review of i28-f-aws: the zip of wheels has the form AWS Glue documents for
``--additional-python-modules`` ("Using Python libraries with AWS Glue", section "(Recommended)
Installing additional Python libraries in AWS Glue 5.0 or above using Zip of Wheels" and its
Appendix A): a file named ``*.gluewheels.zip`` ("create a zip file containing all your wheel
dependencies ... with the `.gluewheels.zip` suffix"), built as ``zip -r
mylibraries-1.0.0.gluewheels.zip wheels/`` with the wheels and requirements.txt in ``wheels/``.
Without the suffix Glue takes the object as an ordinary module to pip-install."""

from __future__ import annotations

import zipfile
from pathlib import Path

import build_modules
import yaml

from tests.support.template import REPO, TEMPLATE, CfnLoader
from tests.support.wheels import repack


def test_the_modules_zip_has_glues_documented_suffix_and_layout(tmp_path: Path) -> None:
    assert build_modules.MODULES_ZIP.endswith(".gluewheels.zip"), build_modules.MODULES_ZIP
    template = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    key = template["Parameters"]["GlueModulesZipKey"]["Default"]
    assert key.endswith(".gluewheels.zip"), key
    wheels = [repack("six", tmp_path / "w"), build_modules.build_tierq_wheel(REPO, tmp_path / "t")]
    made = build_modules.make_modules_zip(tmp_path / build_modules.MODULES_ZIP, wheels)
    with zipfile.ZipFile(made) as archive:
        names = archive.namelist()
    assert all(name.startswith("wheels/") for name in names), names

"""`python -m launch.push run_dir=PATH repo_id=user/name [private=false] [message=...]`: upload a
trained policy's export to the Hugging Face Hub.

run_dir is an export folder (launch.export's) or a run directory whose export is RUN_DIR/export
(made first with launch.export's defaults when there is none). The folder is uploaded as it is,
model card (README.md) included, with `huggingface_hub` (HfApi.create_repo, then upload_folder);
the token is the library's own (HF_TOKEN, or `hf auth login`). Anyone then plays it with
`python -m launch.enjoy run_dir=hf://user/name`.

This upload has not run against the Hub from this project's machines (no network reaches it):
the load path is tested against the local Hugging Face cache (tests/test_export.py).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from launch.cli.overrides import compose_checked, register
from launch.process.exits import exit_now, refuse
from nodes.errors import ConfigError, one_line


@dataclass
class PushArgs:
    run_dir: str | None = None
    repo_id: str | None = None  # user/name (or org/name) on the Hub
    private: bool = False
    message: str = "Upload a distrl policy"


register("push", PushArgs)


def parse(argv) -> PushArgs:
    try:
        args: PushArgs = compose_checked("push", argv)
    except ConfigError as exc:
        refuse(str(exc))
    if not args.run_dir:
        refuse("run_dir=PATH is required (an export folder, or a run directory)")
    if not args.repo_id or args.repo_id.count("/") != 1 or not all(args.repo_id.split("/")):
        refuse(f"repo_id=user/name is required (got {args.repo_id!r})")
    return args


def export_folder(run_dir: str) -> str:
    """The folder to upload: run_dir itself (an export), or its export (made now when missing)."""
    from launch.share.loading import is_export
    if is_export(run_dir):
        return run_dir
    if not os.path.isfile(os.path.join(run_dir, "config.yaml")):
        refuse(f"{run_dir} is neither an export nor a run directory (no config.yaml)")
    folder = os.path.join(run_dir, "export")
    if not is_export(folder):
        from launch import export
        print(f"no export in {run_dir}: exporting its latest checkpoint first", file=sys.stderr, flush=True)
        export.run([f"run_dir={run_dir}"])
    return folder


def run(argv) -> dict:
    args = parse(argv)
    folder = export_folder(args.run_dir)
    try:
        from huggingface_hub import HfApi
    except ImportError:
        refuse("launch.push needs huggingface_hub: pip install -e '.[export]'")
    api = HfApi()
    try:
        api.create_repo(args.repo_id, private=args.private, exist_ok=True)
        info = api.upload_folder(folder_path=folder, repo_id=args.repo_id, commit_message=args.message)
    except Exception as exc:  # noqa: BLE001 - no token, no network, no access: the library's reason in one line
        refuse(f"uploading {folder} to {args.repo_id}: {type(exc).__name__}: {one_line(exc)}")
    return {"repo_id": args.repo_id, "folder": folder, "commit": str(getattr(info, "oid", info))}


def main(argv) -> int:
    result = run(argv)
    print(f"uploaded {result['folder']} to https://huggingface.co/{result['repo_id']}; "
          f"play it with: python -m launch.enjoy run_dir=hf://{result['repo_id']}")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))

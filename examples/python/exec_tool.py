#!/usr/bin/env python3
"""A tool-worker --exec program: the CallRequest as JSON on stdin, the
result as JSON on stdout, one process per call.

    tool-worker --exec 'convert_temperature=python3 examples/python/exec_tool.py'

Exit 0 with the result (a JSON value, or a Pydantic AI form such as
{"kind": "model-retry", "message": ...}); exit 75 also asks the model to
retry; any other exit fails the call with the end of stderr. The worker
sets TOOLGATE_IDEMPOTENCY_KEY (the same on every redelivery of the call):
key any effect outside the process by it.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert import answer  # noqa: E402


def main():
    try:
        request = json.load(sys.stdin)
    except ValueError as e:
        print("the call request is not JSON: %s" % e, file=sys.stderr)
        return 1
    result = answer(request)
    if result.get("kind") == "tool-return":
        result["metadata"]["mode"] = "exec"
        result["metadata"]["idempotency_key"] = os.environ.get("TOOLGATE_IDEMPOTENCY_KEY")
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

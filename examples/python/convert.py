"""The tool both Python executors serve: convert a temperature.

A tool is a function from the call's args (a dict) to a result. The two
executors around it turn a CallRequest into args and the result into what
the tool-worker expects:

- exec_tool.py, for ``tool-worker --exec NAME='python3 exec_tool.py'``:
  one process per call, the CallRequest on stdin, the result on stdout;
- http_tool.py, for ``tool-worker --http NAME=URL``: a web service the
  worker POSTs each CallRequest to.

Standard library only: nothing to install but Python 3.
"""

UNITS = ("celsius", "fahrenheit", "kelvin")


class Retry(Exception):
    """Args the model can correct: it is told the message and may call again."""


def convert(args):
    value = args.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Retry("value must be a number, got %r" % (value,))
    src, dst = args.get("from"), args.get("to")
    for name, unit in (("from", src), ("to", dst)):
        if unit not in UNITS:
            raise Retry("%s must be one of %s, got %r" % (name, ", ".join(UNITS), unit))
    kelvin = {
        "celsius": lambda v: v + 273.15,
        "fahrenheit": lambda v: (v - 32) * 5 / 9 + 273.15,
        "kelvin": lambda v: v,
    }[src](value)
    out = {
        "celsius": lambda k: k - 273.15,
        "fahrenheit": lambda k: (k - 273.15) * 9 / 5 + 32,
        "kelvin": lambda k: k,
    }[dst](kelvin)
    if kelvin < 0:
        raise Retry("%s %s is below absolute zero" % (value, src))
    return {"value": round(out, 2), "unit": dst}


def answer(request):
    """The result of one CallRequest, in the forms the worker reads.

    A plain JSON value is the tool's return value; the Pydantic AI forms
    say more: tool-return with content (what the model reads) and metadata
    (what the application keeps), model-retry, tool-failed.
    """
    try:
        result = convert(request.get("args") or {})
    except Retry as e:
        return {"kind": "model-retry", "message": str(e)}
    return {
        "kind": "tool-return",
        "return_value": result,
        "content": "%s %s is %s %s" % (request["args"]["value"], request["args"]["from"], result["value"], result["unit"]),
        "metadata": {"executor": "python", "tool_call_id": request.get("tool_call_id")},
    }

"""What the demo shows first for each model: recognisable classes, example prompts, and the method it lands on.

Plain data, read by :mod:`arvis.demo.core` (:func:`~arvis.demo.core.model_examples`,
:func:`~arvis.demo.core.landing_method`); ``tests/demo/test_demo.py`` checks every entry against its folder's metadata
(each class is one of the model's class names, each prompt uses only the words its text encoder knows, each
method spec parses).

- :data:`MODEL_EXAMPLES`: by model folder name (the values of :data:`arvis.hub.SHIPPED_PIPELINES`). ``classes``:
  classes a newcomer recognises, the first one selected when the model is; ``prompts``: example prompts for a
  text-conditional model, the first one filled in; ``method``: the spec the model lands on when not its kind's (the
  video model's drafts start from the previous frame). A folder not listed lands on its first class (or an empty
  prompt).
- :data:`LANDING_METHODS`: by decoder kind, method specs in the CLI's grammar (``name:key=value,…``) in order of
  preference; a model lands on the first one it runs. The options given here are also what the page fills in
  whenever that method is chosen for a model of that kind (the rest: the method's declared defaults). Token
  models land on MC-SJD with Gumbel coupling: lossless, and token for token AR's own images, so a first request
  shows "tokens identical to AR: yes".
"""

from __future__ import annotations

PHOTO_CLASSES = ("astronaut", "coffee", "chelsea", "motorcycle", "moon")

MODEL_EXAMPLES: dict[str, dict[str, tuple[str, ...] | str]] = {
    "llamagen-c2i-emoji-names": {"classes": ("red apple", "penguin", "whale", "strawberry", "dog face")},
    "llamagen-c2i-emoji": {"classes": ("happy face", "heart", "bird", "plant")},
    "llamagen-c2i-photos": {"classes": PHOTO_CLASSES},
    "var-emoji": {"classes": ("red apple", "whale", "strawberry", "banana", "panda")},
    "mar-emoji": {"classes": ("red apple", "whale", "strawberry", "banana", "panda")},
    "mar-causal-emoji": {"classes": ("red apple", "whale", "strawberry", "banana", "panda")},
    "video-emoji": {"classes": ("red apple", "whale", "penguin"),
                    "method": "mc-sjd:window=64,coupling=gumbel,init=previous_frame_distribution"},
    "llamagen-t2i-scenes": {"prompts": (
        "a large red circle on the left over grass",
        "a small blue square at the top and a large yellow triangle on the right over gravel",
        "a medium green star in the center over bricks",
    )},
    "emu3-emoji": {"prompts": ("an emoji of a red apple", "penguin emoji", "a whale")},
    "janus-emoji": {"prompts": ("lemon", "red apple", "tomato")},  # trained on the bare emoji names
}

LANDING_METHODS: dict[str, tuple[str, ...]] = {
    "token": ("mc-sjd:coupling=gumbel", "zipar"),
    "next-scale": ("code", "cfg-cutoff", "fastvar"),
    "continuous": ("cspd-exact", "cspd"),
}

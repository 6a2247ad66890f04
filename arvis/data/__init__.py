"""Deterministic offline data built from the photos that ship with scikit-image and scikit-learn.

* :mod:`arvis.data.photos` - registry of the source photos; ``PHOTO_CLASSES`` is the class list.
* :mod:`arvis.data.crops` - class-conditional crops (ImageNet stand-in) with disjoint train / held-out regions.
* :mod:`arvis.data.scenes` - captioned compositional scenes (COCO stand-in) and their word vocabulary.
* :mod:`arvis.data.video` - short camera-motion clips (pan / zoom).
* :mod:`arvis.data.cache` - atomic ``.npz`` cache under ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``.

No image data is committed: everything is regenerated from a seed.
"""

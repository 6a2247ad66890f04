"""Showing acceleration side by side: plain AR and parallel decoding methods on the same model and seeds.

- :mod:`arvis.demo.compare` — run several methods on the same images, time them fairly, write the
  images next to each other with a table (``arvis generate --method A --method B``, ``make demo``);
- :mod:`arvis.demo.core` — the Gradio demo's logic without Gradio (limits, validation, streaming);
- :mod:`arvis.demo.page` — the Gradio page (imports Gradio; only ``arvis demo`` imports it);
- :mod:`arvis.demo.command` — the ``arvis demo`` subcommand.

Importing this package imports neither Gradio nor torch.
"""

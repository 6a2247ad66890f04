"""User-facing applications built on arvis (the Gradio demo). Nothing under ``arvis/`` imports this package."""

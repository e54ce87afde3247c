"""Deployment exports of compressed models: ONNX, verified in ONNX Runtime (`theseus_zoo.export.onnx`).

Imported on demand (``theseus export --onnx RUN_DIR``): it needs the ``onnx`` extra.
"""

"""Export of students to ONNX, TFLite and SavedModel bundles — see the project's issue #6."""

"""Sample model repository: simple, simple_string and densenet_onnx, built with onnx locally."""

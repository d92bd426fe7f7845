"""End-to-end tests: real torch.onnx exports lowered for a real EP (WebGPU on lavapipe)."""

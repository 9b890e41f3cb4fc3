"""The upstream sample's request design, for bench-score's baseline only (never deployed).

The client sends one image preprocessed into a 1x3x224x224 float list; run() parses the JSON into
a tensor and runs the model on it, returning the probability as a string.
"""

import json
import os

import torch

from image_classifier.inference import load_model

model = None
classes = None


def init():
    global model, classes
    loaded = load_model(os.environ["AZUREML_MODEL_DIR"])
    model, classes = loaded.model, loaded.classes


def run(input_data):
    tensor = torch.tensor(json.loads(input_data)["data"])
    with torch.no_grad():
        probabilities = torch.softmax(model(tensor), dim=1).numpy()[0]
    index = int(probabilities.argmax())
    return {"label": classes[index], "probability": str(probabilities[index])}

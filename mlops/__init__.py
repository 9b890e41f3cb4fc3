"""Local tooling for the Azure ML specs: validation and local runs. Never shipped to Azure."""

"""Protobuf and gRPC modules generated from api/pulsarfunctions/*.proto by
api/generate.sh (grpcio-tools). Do not edit; regenerate."""

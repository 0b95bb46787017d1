"""NeMo Gym's entry point for ``OrsResourcesServer`` (its config: ``configs/ors.yaml``)."""

from nemo_gym.server_utils import is_nemo_gym_fastapi_entrypoint

from ors_gym.nemo_gym import OrsResourcesServer

if __name__ == "__main__":
    OrsResourcesServer.run_webserver()
elif is_nemo_gym_fastapi_entrypoint(__file__):
    app = OrsResourcesServer.run_webserver()

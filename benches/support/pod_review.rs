//! The AdmissionReview bodies the admission benchmarks send: a realistic
//! vLLM Deployment pod (1 GPU, 20,000 MiB) padded with env vars to a size.

use serde_json::{Value, json};

/// A realistic GPU pod as its Deployment creates it: a vLLM server asking
/// 1 GPU and 20,000 MiB.
pub fn vllm_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "inference-7d9f8b6c5-x2x4k", "namespace": "serving",
                      "generateName": "inference-7d9f8b6c5-",
                      "labels": {"app": "inference", "pod-template-hash": "7d9f8b6c5"},
                      "annotations": {}},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{
                "name": "server", "image": "vllm/vllm-openai:v0.6.3",
                "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.9"],
                "ports": [{"containerPort": 8000, "protocol": "TCP"}],
                "env": [],
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "cpu": "4", "memory": "16Gi"}},
                "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]
            }],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]
        }
    })
}

/// A review of [`vllm_pod`] padded with env vars to about `target` bytes.
pub fn review(target: usize) -> Vec<u8> {
    let mut pod = vllm_pod();
    let mut i = 0;
    loop {
        let body = wrap(&pod);
        if body.len() >= target {
            return body;
        }
        pod["spec"]["containers"][0]["env"]
            .as_array_mut()
            .expect("env is a list")
            .push(json!({"name": format!("SETTING_{i:04}"), "value": "some-configuration-value-0123456789"}));
        i += 1;
    }
}

fn wrap(pod: &Value) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "serving", "operation": "CREATE",
                    "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                    "object": pod, "dryRun": false}
    })
    .to_string()
    .into_bytes()
}

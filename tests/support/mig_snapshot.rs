//! A cluster snapshot with one A100-40GB in MIG mode (`GPU-mig` on node
//! `mig`) and pods holding 1g.5gb instances of it, in HAMi v2.10's
//! formats, for tests that need the whole cluster view.

/// Node `mig`: its GPU registers 1g.5gb at the starts given and 3g.20gb at
/// starts 0 and 4 (slices 0-3 and 4-7).
pub fn mig_node(one_g_starts: &[u32]) -> String {
    let one_g: Vec<String> = one_g_starts
        .iter()
        .map(|s| format!(r#"{{"start":{s},"size":1}}"#))
        .collect();
    format!(
        r#"apiVersion: v1
kind: Node
metadata:
  name: mig
  annotations:
    hami.io/node-nvidia-register: '[{{"id":"GPU-mig","index":0,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","health":true,"mode":"mig","migProfiles":[{{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{}]}},{{"name":"3g.20gb","memoryMB":19968,"core":43,"sliceCount":4,"placements":[{{"start":0,"size":4}},{{"start":4,"size":4}}]}}]}}]'
"#,
        one_g.join(",")
    )
}

/// A running pod `ml/<name>` (uid `u-<name>`, `priority`) on node `mig`
/// holding the 1g.5gb instance at `start`, as HAMi's annotations record it.
pub fn holder(name: &str, start: u32, priority: i32) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  uid: u-{name}
  annotations:
    hami.io/vgpu-node: mig
    hami.io/vgpu-devices-allocated: "GPU-mig,NVIDIA,4864,15:;"
    hami.io/vgpu-mig-allocations: '[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-mig","profile":"1g.5gb","placement":{{"start":{start},"size":1}}}}]'
spec:
  nodeName: mig
  priority: {priority}
  containers: [{{name: main, image: x}}]
status: {{phase: Running}}
"#
    )
}

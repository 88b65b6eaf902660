//! The fuzz check of the extender's request reader (`wire.rs`, read by
//! hand in any letter case): any bytes are read as each verb's arguments
//! without a panic; what is read is read again the same from the JSON
//! kube-scheduler would send for it.

use serde_json::{Value, json};

use super::wire::{BindingArgs, Candidates, ExtenderArgs, PreemptionArgs};

/// Panics when an invariant breaks.
pub fn check_extender_args(data: &[u8]) {
    if let Ok(args) = ExtenderArgs::parse(data) {
        let names = args.candidates.name_list();
        let count = match &args.candidates {
            Candidates::Names(n) => n.len(),
            Candidates::Nodes(n) => n.len(),
        };
        assert_eq!(names.len(), count, "one name per candidate");
        let pod = serde_json::to_value(&args.pod).expect("a read pod serialises");
        let again = match &args.candidates {
            Candidates::Names(n) => json!({"Pod": pod, "NodeNames": n}),
            Candidates::Nodes(n) => json!({"Pod": pod, "Nodes": {"items": n}}),
        };
        let reread =
            ExtenderArgs::parse(again.to_string().as_bytes()).expect("what was read is read again");
        assert_eq!(reread.pod, args.pod, "the pod reads the same");
        assert_eq!(reread.candidates.name_list(), names, "the same candidates");
    }
    if let Ok(args) = BindingArgs::parse(data) {
        let again = json!({"PodName": args.pod_name, "PodNamespace": args.pod_namespace,
                           "PodUID": args.pod_uid, "Node": args.node});
        let reread =
            BindingArgs::parse(again.to_string().as_bytes()).expect("what was read is read again");
        assert_eq!(reread, args);
    }
    if let Ok(args) = PreemptionArgs::parse(data) {
        let victims: serde_json::Map<String, Value> = args
            .victims
            .iter()
            .map(|(node, v)| {
                let pods: Vec<Value> = v.uids.iter().map(|u| json!({"UID": u})).collect();
                (
                    node.clone(),
                    json!({"Pods": pods, "NumPDBViolations": v.pdb_violations}),
                )
            })
            .collect();
        let pod = serde_json::to_value(&args.pod).expect("a read pod serialises");
        let again = json!({"Pod": pod, "NodeNameToMetaVictims": victims});
        let reread = PreemptionArgs::parse(again.to_string().as_bytes())
            .expect("what was read is read again");
        assert_eq!(reread.pod, args.pod);
        assert_eq!(reread.victims, args.victims);
    }
}

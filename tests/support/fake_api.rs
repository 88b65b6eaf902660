//! An in-memory kube-apiserver for tests, behind kube's mock service
//! (tower-test): objects stored as JSON by path, resourceVersions, 404, 409
//! on create and on stale replaces, JSON and merge patches, and injected
//! failures. It answers what the real server would for the calls gpugate
//! makes, so tests check the writes themselves, not a script of them.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Value,
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<String, Value>,
    version: u64,
    seen: Vec<Seen>,
    /// (method, path fragment, status, matches to let through first, times left)
    failures: Vec<(Method, String, u16, usize, usize)>,
    /// (method, path fragment, times left): done, then answered 504 as if
    /// the answer was lost.
    lost: Vec<(Method, String, usize)>,
}

#[derive(Debug, Clone, Default)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl FakeApi {
    /// A kube client whose requests this fake answers (until the client is dropped).
    pub fn client(&self) -> kube::Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let (code, value) = fake.answer(&parts, &bytes);
                let response = Response::builder()
                    .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&value).unwrap_or_default()))
                    .unwrap();
                send.send_response(response);
            }
        });
        kube::Client::new(service, "default")
    }

    /// Stores an object at its path (as a test's starting state).
    pub fn put(&self, path: &str, mut object: Value) {
        let mut inner = self.inner.lock().unwrap();
        inner.version += 1;
        object["metadata"]["resourceVersion"] = json!(inner.version.to_string());
        inner.objects.insert(path.to_string(), object);
    }

    /// Changes a stored object in place (as another client would), bumping
    /// its resourceVersion. Returns false when there is no such object.
    pub fn update(&self, path: &str, change: impl FnOnce(&mut Value)) -> bool {
        let mut inner = self.inner.lock().unwrap();
        inner.version += 1;
        let version = inner.version;
        match inner.objects.get_mut(path) {
            Some(o) => {
                change(o);
                o["metadata"]["resourceVersion"] = json!(version.to_string());
                true
            }
            None => false,
        }
    }

    /// Every stored object whose path starts with `prefix`.
    pub fn list(&self, prefix: &str) -> Vec<(String, Value)> {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn delete(&self, path: &str) -> Option<Value> {
        self.inner.lock().unwrap().objects.remove(path)
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.inner.lock().unwrap().objects.get(path).cloned()
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }

    /// The next `times` requests with this method whose path contains
    /// `fragment` fail with `code`.
    pub fn fail(&self, method: Method, fragment: &str, code: u16, times: usize) {
        self.fail_after(method, fragment, code, 0, times);
    }

    /// Like [`FakeApi::fail`], after letting `skip` matching requests through.
    pub fn fail_after(&self, method: Method, fragment: &str, code: u16, skip: usize, times: usize) {
        self.inner
            .lock()
            .unwrap()
            .failures
            .push((method, fragment.to_string(), code, skip, times));
    }

    /// The next `times` requests with this method whose path contains
    /// `fragment` take effect, but their answer is a 504 (lost).
    pub fn lose(&self, method: Method, fragment: &str, times: usize) {
        self.inner
            .lock()
            .unwrap()
            .lost
            .push((method, fragment.to_string(), times));
    }

    fn answer(&self, parts: &http::request::Parts, body: &[u8]) -> (u16, Value) {
        let path = parts.uri.path().to_string();
        let lose = {
            let mut inner = self.inner.lock().unwrap();
            match inner
                .lost
                .iter_mut()
                .find(|l| l.0 == parts.method && path.contains(&l.1) && l.2 > 0)
            {
                Some(l) => {
                    l.2 -= 1;
                    true
                }
                None => false,
            }
        };
        let (code, value) = self.apply(parts, body);
        if lose && code < 300 {
            return status(504, "Timeout", "the answer was lost");
        }
        (code, value)
    }

    fn apply(&self, parts: &http::request::Parts, body: &[u8]) -> (u16, Value) {
        let mut inner = self.inner.lock().unwrap();
        let path = parts.uri.path().to_string();
        let content_type = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        inner.seen.push(Seen {
            method: parts.method.clone(),
            path: path.clone(),
            content_type: content_type.clone(),
            body: body.clone(),
        });
        let mut injected = None;
        for f in inner
            .failures
            .iter_mut()
            .filter(|f| f.0 == parts.method && path.contains(&f.1) && f.4 > 0)
        {
            if f.3 > 0 {
                f.3 -= 1;
                continue;
            }
            f.4 -= 1;
            injected = Some(f.2);
            break;
        }
        if let Some(code) = injected {
            if code == 409 {
                // As if another client had just changed the object.
                inner.version += 1;
                let version = inner.version;
                if let Some(o) = inner.objects.get_mut(&path) {
                    o["metadata"]["resourceVersion"] = json!(version.to_string());
                }
            }
            let reason = match code {
                404 => "NotFound",
                409 => "Conflict",
                _ => "InternalError",
            };
            return status(code, reason, "injected failure");
        }
        match parts.method {
            Method::GET if path == "/version" => (
                200,
                json!({"major": "1", "minor": "36", "gitVersion": "v1.36.3", "gitCommit": "",
                    "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""}),
            ),
            Method::GET => match inner.objects.get(&path) {
                Some(o) => (200, o.clone()),
                None => status(404, "NotFound", &format!("{path} not found")),
            },
            Method::POST if path.ends_with("/binding") => {
                // pods/NAME/binding: assigns the pod once, to the UID asked.
                let pod_path = path.trim_end_matches("/binding").to_string();
                let version = inner.version + 1;
                let Some(pod) = inner.objects.get_mut(&pod_path) else {
                    return status(404, "NotFound", &format!("{pod_path} not found"));
                };
                if let Some(uid) = body["metadata"]["uid"].as_str()
                    && Some(uid) != pod["metadata"]["uid"].as_str()
                {
                    return status(409, "Conflict", "Precondition failed: UID in precondition");
                }
                if let Some(n) = pod["spec"]["nodeName"].as_str() {
                    return status(
                        409,
                        "Conflict",
                        &format!("pod is already assigned to node {n:?}"),
                    );
                }
                pod["spec"]["nodeName"] = body["target"]["name"].clone();
                // As kube-apiserver 1.35+: the Binding's annotations and
                // labels are merged onto the pod.
                for key in ["annotations", "labels"] {
                    if let Some(extra) = body["metadata"][key].as_object() {
                        if !pod["metadata"][key].is_object() {
                            pod["metadata"][key] = json!({});
                        }
                        for (k, v) in extra {
                            pod["metadata"][key][k] = v.clone();
                        }
                    }
                }
                pod["metadata"]["resourceVersion"] = json!(version.to_string());
                inner.version = version;
                let (_, mut ok) = status(201, "", "");
                ok["status"] = json!("Success");
                (201, ok)
            }
            Method::POST => {
                let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
                let item = format!("{path}/{name}");
                if inner.objects.contains_key(&item) {
                    return status(409, "AlreadyExists", &format!("{item} already exists"));
                }
                inner.version += 1;
                let mut o = body;
                o["metadata"]["resourceVersion"] = json!(inner.version.to_string());
                o["metadata"]["uid"] = json!(format!("uid-{}", inner.version));
                inner.objects.insert(item, o.clone());
                (201, o)
            }
            Method::PUT => {
                let Some(old) = inner.objects.get(&path) else {
                    return status(404, "NotFound", &format!("{path} not found"));
                };
                let want = body["metadata"]["resourceVersion"].as_str();
                if want.is_some() && want != old["metadata"]["resourceVersion"].as_str() {
                    return status(409, "Conflict", "the object has been modified");
                }
                // Secrets' type is immutable.
                if old.get("type").is_some() && old.get("type") != body.get("type") {
                    return status(422, "Invalid", "type: field is immutable");
                }
                inner.version += 1;
                let mut o = body;
                o["metadata"]["resourceVersion"] = json!(inner.version.to_string());
                inner.objects.insert(path, o.clone());
                (200, o)
            }
            Method::PATCH => {
                let Some(mut o) = inner.objects.get(&path).cloned() else {
                    return status(404, "NotFound", &format!("{path} not found"));
                };
                match content_type.as_deref() {
                    Some("application/json-patch+json") => {
                        let Ok(patch) = serde_json::from_value::<json_patch::Patch>(body) else {
                            return status(400, "BadRequest", "not a JSON patch");
                        };
                        if let Err(e) = json_patch::patch(&mut o, &patch) {
                            return status(422, "Invalid", &e.to_string());
                        }
                    }
                    Some("application/merge-patch+json")
                    | Some("application/strategic-merge-patch+json") => {
                        let want = body["metadata"]["resourceVersion"].as_str();
                        if want.is_some() && want != o["metadata"]["resourceVersion"].as_str() {
                            return status(409, "Conflict", "the object has been modified");
                        }
                        json_patch::merge(&mut o, &body);
                    }
                    other => return status(415, "UnsupportedMediaType", &format!("{other:?}")),
                }
                inner.version += 1;
                o["metadata"]["resourceVersion"] = json!(inner.version.to_string());
                inner.objects.insert(path, o.clone());
                (200, o)
            }
            Method::DELETE => match inner.objects.remove(&path) {
                Some(o) => (200, o),
                None => status(404, "NotFound", &format!("{path} not found")),
            },
            _ => status(405, "MethodNotAllowed", "method not allowed"),
        }
    }
}

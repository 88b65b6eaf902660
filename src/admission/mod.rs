//! The admission half of gpugate: the AdmissionReview envelope and the
//! mutating and validating webhooks (the namespace policy gateway is next).

pub mod handler;
pub mod mutate;
pub mod review;
pub mod validate;

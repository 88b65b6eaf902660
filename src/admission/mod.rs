//! The admission half of gpugate: the AdmissionReview envelope, and (next)
//! the mutating and validating webhooks and the namespace policy gateway.

pub mod handler;
pub mod mutate;
pub mod review;

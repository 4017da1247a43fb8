//! The Node controllers (Karpenter's `pkg/controllers/node`): termination
//! (taint, drain, wait for volumes, delete the claim) and health (repair
//! nodes whose conditions stay unhealthy past the provider's toleration).

pub mod health;
pub mod termination;

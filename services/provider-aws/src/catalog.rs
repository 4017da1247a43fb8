//! The cached view of EC2: instance types, where they are offered, prices,
//! and offerings that recently ran out of capacity.
//!
//! ```text
//!   DescribeInstanceTypes ─┐                     ┌─ TTL (instance_types_ttl)
//!   DescribeInstanceType-  ├─▶ Catalog.types ────┤
//!     Offerings            ┘                     └─ refreshed on demand
//!   pricing:GetProducts ───┐   (not with ISOLATED_VPC)
//!   DescribeSpotPrice-     ├─▶ Catalog.prices ─── refreshed on a timer
//!     History              ┘   (fallback: estimate from vCPU / memory)
//!   CreateFleet ICE ─────────▶ Catalog.unavailable (3 minutes)
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, LocationType};

use crate::aws::{Clients, Settings};
use crate::error::Error;
use crate::instancetype::{OfferingSource, TypeInfo};

/// How long an offering that failed with insufficient capacity is skipped.
pub const UNAVAILABLE_TTL: Duration = Duration::from_secs(3 * 60);

/// Instance types and the zones each is offered in.
#[derive(Debug, Default)]
pub struct Types {
    pub infos: Vec<TypeInfo>,
    pub zones: HashMap<String, BTreeSet<String>>,
}

/// Hourly prices.
#[derive(Debug, Default, Clone)]
pub struct Prices {
    pub on_demand: HashMap<String, f64>,
    pub spot: HashMap<(String, String), f64>,
    /// Whether on-demand prices are estimates because the Pricing API did not answer.
    pub on_demand_estimated: bool,
    pub refreshed: Option<Instant>,
}

pub struct Catalog {
    clients: Clients,
    settings: Settings,
    types: tokio::sync::Mutex<Option<(Instant, Arc<Types>)>>,
    prices: RwLock<Arc<Prices>>,
    prices_refresh: tokio::sync::Mutex<()>,
    unavailable: Mutex<HashMap<(String, String, String), Instant>>,
    /// Bumped whenever types, prices or unavailable offerings change, so
    /// catalogs built from them can be reused until then.
    generation: AtomicU64,
}

/// A snapshot of what offerings depend on, for one catalog build.
pub struct OfferingView {
    pub prices: Arc<Prices>,
    pub unavailable: HashMap<(String, String, String), Instant>,
}

impl OfferingSource for OfferingView {
    fn on_demand_price(&self, instance_type: &str) -> Option<f64> {
        self.prices.on_demand.get(instance_type).copied()
    }

    fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.prices
            .spot
            .get(&(instance_type.to_string(), zone.to_string()))
            .copied()
    }

    fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.unavailable
            .get(&(
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ))
            .is_some_and(|until| *until > Instant::now())
    }
}

/// The on-demand price used when the Pricing API cannot be reached: an
/// estimate from the type's size, $0.0316 per vCPU-hour + $0.00424 per
/// GiB-hour + $0.50 per GPU or accelerator-hour (m5-like general-purpose
/// rates). It keeps relative ordering sensible; it is not a quote.
pub fn estimated_on_demand_price(info: &TypeInfo) -> f64 {
    let devices = info.device_count();
    let price = 0.0316 * info.vcpus as f64
        + 0.00424 * (info.memory_mib as f64 / 1024.0)
        + 0.5 * devices as f64;
    (price * 10_000.0).round() / 10_000.0
}

impl Catalog {
    pub fn new(clients: Clients, settings: Settings) -> Self {
        Self {
            clients,
            settings,
            types: tokio::sync::Mutex::new(None),
            prices: RwLock::new(Arc::new(Prices::default())),
            prices_refresh: tokio::sync::Mutex::new(()),
            unavailable: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    /// Changes whenever anything a built catalog depends on changes (an
    /// unavailable offering expiring included, via `offering_view`).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The instance types, from cache while fresh.
    pub async fn types(&self) -> Result<Arc<Types>, Error> {
        let mut guard = self.types.lock().await;
        if let Some((at, types)) = guard.as_ref()
            && at.elapsed() < self.settings.instance_types_ttl
        {
            return Ok(types.clone());
        }
        let types = Arc::new(self.fetch_types().await?);
        *guard = Some((Instant::now(), types.clone()));
        self.bump();
        Ok(types)
    }

    async fn fetch_types(&self) -> Result<Types, Error> {
        let mut infos = Vec::new();
        let mut pages = self
            .clients
            .ec2
            .describe_instance_types()
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("ec2:DescribeInstanceTypes", &e))?;
            infos.extend(page.instance_types().iter().filter_map(TypeInfo::from_sdk));
        }
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut pages = self
            .clients
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("ec2:DescribeInstanceTypeOfferings", &e))?;
            for offering in page.instance_type_offerings() {
                if let (Some(t), Some(zone)) = (offering.instance_type(), offering.location()) {
                    zones
                        .entry(t.as_str().to_string())
                        .or_default()
                        .insert(zone.to_string());
                }
            }
        }
        tracing::debug!(types = infos.len(), "instance types refreshed");
        Ok(Types { infos, zones })
    }

    /// Prices, fetching them the first time.
    pub async fn prices(&self) -> Result<Arc<Prices>, Error> {
        let current = self.current_prices();
        if current.refreshed.is_some() {
            return Ok(current);
        }
        self.refresh_prices().await
    }

    fn current_prices(&self) -> Arc<Prices> {
        match self.prices.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Fetches on-demand and spot prices now (one refresh at a time).
    pub async fn refresh_prices(&self) -> Result<Arc<Prices>, Error> {
        let _one_at_a_time = self.prices_refresh.lock().await;
        let current = self.current_prices();
        if current
            .refreshed
            .is_some_and(|at| at.elapsed() < Duration::from_secs(1))
        {
            return Ok(current);
        }
        let types = self.types().await?;
        let fetched = if self.settings.isolated_vpc {
            Ok(HashMap::new())
        } else {
            self.fetch_on_demand().await
        };
        let (on_demand, estimated) = match fetched {
            Ok(_) if self.settings.isolated_vpc => {
                tracing::debug!(
                    "ISOLATED_VPC: on-demand prices are estimated, the Pricing API is not asked"
                );
                (HashMap::new(), true)
            }
            Ok(prices) if !prices.is_empty() => (prices, false),
            Ok(_) => {
                tracing::warn!("the Pricing API returned no prices; estimating on-demand prices");
                (HashMap::new(), true)
            }
            Err(error) => {
                tracing::warn!(%error, "the Pricing API is unreachable; estimating on-demand prices");
                (HashMap::new(), true)
            }
        };
        let mut on_demand = on_demand;
        for info in &types.infos {
            if !on_demand.contains_key(&info.name) && estimated {
                on_demand.insert(info.name.clone(), estimated_on_demand_price(info));
            }
        }
        let spot = match self.fetch_spot().await {
            Ok(spot) => spot,
            Err(error) => {
                tracing::warn!(%error, "spot price history unavailable; keeping previous spot prices");
                current.spot.clone()
            }
        };
        let prices = Arc::new(Prices {
            on_demand,
            spot,
            on_demand_estimated: estimated,
            refreshed: Some(Instant::now()),
        });
        match self.prices.write() {
            Ok(mut p) => *p = prices.clone(),
            Err(poisoned) => *poisoned.into_inner() = prices.clone(),
        }
        self.bump();
        Ok(prices)
    }

    /// On-demand prices: shared-tenancy instances, and bare metal, which
    /// AWS prices only as dedicated "Compute Instance (bare metal)".
    async fn fetch_on_demand(&self) -> Result<HashMap<String, f64>, Error> {
        let mut prices = self.fetch_products("Shared", "Compute Instance").await?;
        match self
            .fetch_products("Dedicated", "Compute Instance (bare metal)")
            .await
        {
            Ok(metal) => {
                for (name, price) in metal {
                    prices.entry(name).or_insert(price);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "bare-metal prices unavailable; bare-metal types keep no on-demand offering");
            }
        }
        Ok(prices)
    }

    async fn fetch_products(
        &self,
        tenancy: &str,
        product_family: &str,
    ) -> Result<HashMap<String, f64>, Error> {
        use aws_sdk_pricing::types::{Filter as PFilter, FilterType};
        let filters = [
            ("regionCode", self.settings.region.as_str()),
            ("tenancy", tenancy),
            ("productFamily", product_family),
            ("preInstalledSw", "NA"),
            ("operatingSystem", "Linux"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
        ];
        let mut request = self
            .clients
            .pricing
            .get_products()
            .service_code("AmazonEC2");
        for (field, value) in filters {
            let filter = PFilter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| Error::Internal(format!("building a pricing filter: {e}")))?;
            request = request.filters(filter);
        }
        let mut prices = HashMap::new();
        let mut pages = request.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("pricing:GetProducts", &e))?;
            for doc in page.price_list() {
                if let Some((name, price)) = parse_price_document(doc) {
                    prices.insert(name, price);
                }
            }
        }
        Ok(prices)
    }

    async fn fetch_spot(&self) -> Result<HashMap<(String, String), f64>, Error> {
        let mut spot: HashMap<(String, String), (f64, i64)> = HashMap::new();
        let mut pages = self
            .clients
            .ec2
            .describe_spot_price_history()
            .filters(
                Filter::builder()
                    .name("product-description")
                    .values("Linux/UNIX")
                    .values("Linux/UNIX (Amazon VPC)")
                    .build(),
            )
            .start_time(aws_sdk_ec2::primitives::DateTime::from(
                std::time::SystemTime::now(),
            ))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("ec2:DescribeSpotPriceHistory", &e))?;
            for entry in page.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) = (
                    entry.instance_type(),
                    entry.availability_zone(),
                    entry.spot_price().and_then(|p| p.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let at = entry.timestamp().map(|t| t.secs()).unwrap_or(0);
                let key = (t.as_str().to_string(), zone.to_string());
                match spot.get(&key) {
                    Some((_, seen)) if *seen > at => {}
                    _ => {
                        spot.insert(key, (price, at));
                    }
                }
            }
        }
        Ok(spot.into_iter().map(|(k, (p, _))| (k, p)).collect())
    }

    /// Remembers that an offering ran out of capacity.
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let mut map = match self.unavailable.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = Instant::now();
        map.retain(|_, until| *until > now);
        map.insert(
            (
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ),
            now + UNAVAILABLE_TTL,
        );
        drop(map);
        self.bump();
    }

    /// Prices and unavailable offerings as of now.
    pub async fn offering_view(&self) -> Result<OfferingView, Error> {
        let prices = self.prices().await?;
        let unavailable = {
            let mut map = match self.unavailable.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            let now = Instant::now();
            let before = map.len();
            map.retain(|_, until| *until > now);
            if map.len() != before {
                self.bump();
            }
            map.clone()
        };
        Ok(OfferingView {
            prices,
            unavailable,
        })
    }

    /// Refreshes prices every `pricing_refresh` until the catalog is dropped.
    pub fn spawn_price_refresher(self: &Arc<Self>) {
        crate::spawn_every(
            self,
            self.settings.pricing_refresh,
            "refreshing prices",
            |catalog| async move { catalog.refresh_prices().await.map(drop) },
        );
    }
}

/// `(instance type, USD per hour)` from one Pricing API price-list document.
pub fn parse_price_document(doc: &str) -> Option<(String, f64)> {
    let value: serde_json::Value = serde_json::from_str(doc).ok()?;
    let name = value
        .pointer("/product/attributes/instanceType")?
        .as_str()?
        .to_string();
    let terms = value.pointer("/terms/OnDemand")?.as_object()?;
    for term in terms.values() {
        let Some(dimensions) = term.get("priceDimensions").and_then(|d| d.as_object()) else {
            continue;
        };
        for dimension in dimensions.values() {
            if let Some(price) = dimension
                .pointer("/pricePerUnit/USD")
                .and_then(|p| p.as_str())
                .and_then(|p| p.parse::<f64>().ok())
                && price > 0.0
            {
                return Some((name, price));
            }
        }
    }
    None
}

//! Fencing tokens protecting a store from a holder that was paused past its TTL.
//!
//! Holder A takes the lock with a short TTL and "pauses" (sleeps) past it; holder B takes
//! the lock over and writes. When A wakes up and writes with its older fence, the store
//! refuses it — atomically, in the store's own check — so B's write stands.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example fenced_storage`

use std::time::Duration;

use redis::aio::ConnectionManager;
use redmutex::Locker;

/// A store (here a Redis key) that accepts a write only with a fence at least as high as
/// the highest it has accepted. KEYS[1]: the data, KEYS[2]: the highest fence seen.
/// ARGV[1]: the value, ARGV[2]: the writer's fence. Returns 1 when written, 0 if refused.
const FENCED_WRITE: &str = r"
local highest = tonumber(redis.call('get', KEYS[2]) or '0')
if tonumber(ARGV[2]) < highest then
  return 0
end
redis.call('set', KEYS[2], ARGV[2])
redis.call('set', KEYS[1], ARGV[1])
return 1
";

async fn write(
    store: &mut ConnectionManager,
    value: &str,
    fence: u64,
) -> Result<bool, redis::RedisError> {
    redis::Script::new(FENCED_WRITE)
        .key("example:report:data")
        .key("example:report:highest-fence")
        .arg(value)
        .arg(fence)
        .invoke_async(store)
        .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");
    let mut store = redmutex::connection::connect(&url).await?;

    // A takes its fence with the lock (one round trip for both) ...
    let a = locker
        .acquire("report", Duration::from_millis(300))
        .with_fence()
        .await?;
    let fence_a = a.fence().await?;
    println!("A holds the lock with fence {fence_a}, then pauses past its TTL");
    tokio::time::sleep(Duration::from_millis(400)).await;

    // ... B asks for it after acquiring, while it holds the lock.
    let b = locker.acquire("report", Duration::from_secs(10)).await?;
    let fence_b = b.fence().await?;
    println!("B takes it over with fence {fence_b}");
    assert!(write(&mut store, "written by B", fence_b).await?);
    println!("B's write accepted");

    // A wakes up, unaware, and writes: the store refuses the older fence.
    let accepted = write(&mut store, "written by A", fence_a).await?;
    println!(
        "A's late write {}",
        if accepted { "ACCEPTED" } else { "refused" }
    );
    assert!(!accepted);
    let data: String = redis::cmd("GET")
        .arg("example:report:data")
        .query_async(&mut store)
        .await?;
    assert_eq!(data, "written by B");
    println!("the store holds {data:?}");

    // A's release is refused as well: the lock is B's.
    assert!(matches!(a.release().await, Err(redmutex::Error::NotHeld)));
    b.release().await?;
    let info = locker.inspect("report").await?;
    println!("latest fence of the lock: {:?}", info.fence);
    Ok(())
}

//! The outbox's worked example (docs/outbox.md): an order and its confirmation-email
//! task written in one transaction of the shop's own Postgres. Run a broker, then
//!
//! ```sh
//! export DATABASE_URL=postgres://shop@127.0.0.1/shop
//! cargo run -p taskbroker-client --features outbox --example outbox_orders
//! taskbroker relay --source "$DATABASE_URL" --once    # ships the committed row
//! taskbroker list --queue emails
//! ```

use taskbroker_client::{TaskSpec, outbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL to the shop's Postgres")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    // Usually part of the shop's own migrations (migrations/outbox/postgres/).
    outbox::init_schema(&pool).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, email text NOT NULL, total_cents bigint NOT NULL)",
    )
    .execute(&pool)
    .await?;

    let order_id: i64 = std::process::id().into();
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id, email, total_cents) VALUES ($1, $2, $3)")
        .bind(order_id)
        .bind("ada@example.com")
        .bind(1999_i64)
        .execute(&mut *tx)
        .await?;
    // The task's key makes it one email per order, however often this code runs.
    let email = TaskSpec::json("emails", &serde_json::json!({"order_id": order_id}))?
        .key(format!("order-confirmation-{order_id}"))
        .max_attempts(10);
    let row = outbox::enqueue(&mut tx, email).await?;
    // Both or neither: if the commit fails, there is no order and no email.
    tx.commit().await?;
    println!(
        "order {order_id} committed; its email task has key {}",
        row.key
    );
    Ok(())
}

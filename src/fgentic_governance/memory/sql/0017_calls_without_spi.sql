-- 0017: the two helpers every gated write runs twice or once call their functions as plain
-- expressions. PL/pgSQL runs each PERFORM as a query through SPI (a plan, an executor start
-- and end); an assignment of the same call is evaluated directly. Same calls, same order,
-- same effects: transaction-local timeouts (bound_transaction) and the shared or exclusive
-- entry lock (entry_lock). The result (void, as text: '') is discarded.

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.

-- requires: functions/scope_recall_guard
DROP TRIGGER IF EXISTS scope_recall_guard ON fgentic_memory.scope;
CREATE TRIGGER scope_recall_guard BEFORE INSERT OR UPDATE ON fgentic_memory.scope
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_recall_guard();

-- requires: functions/scope_guard
DROP TRIGGER IF EXISTS scope_guard ON fgentic_memory.scope;
CREATE TRIGGER scope_guard BEFORE INSERT OR UPDATE ON fgentic_memory.scope
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_guard();

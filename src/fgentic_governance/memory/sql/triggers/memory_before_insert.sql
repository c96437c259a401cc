-- requires: functions/memory_before_insert
DROP TRIGGER IF EXISTS memory_before_insert ON fgentic_memory.memory;
DO $$
BEGIN
    EXECUTE format(
        'CREATE TRIGGER memory_before_insert BEFORE INSERT ON fgentic_memory.memory'
        ' FOR EACH ROW WHEN (current_user IS DISTINCT FROM %L::name'
        ' OR current_setting(''fgentic_memory.gate'', true) IS DISTINCT FROM ''on'')'
        ' EXECUTE FUNCTION fgentic_memory.memory_before_insert()',
        current_user);
END
$$;
